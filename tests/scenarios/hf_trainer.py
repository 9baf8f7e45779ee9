"""A Hugging Face Trainer run on a tiny, randomly initialised GPT-2 built from its config.

Nothing is downloaded: the model comes from a config, the token ids from torch. The DataLoader is
the Trainer's own, with its default settings, so its batch size sits where the Trainer puts it.
"""

import argparse
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--max-steps", type=int, default=300)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--seq-len", type=int, default=32)
parser.add_argument("--eval-steps", type=int, default=0, help="evaluate every N steps (0: never)")
parser.add_argument("--save-steps", type=int, default=0, help="save every N steps (0: never)")
args = parser.parse_args()

VOCAB = 128


class RandomTokens(Dataset):
    def __init__(self, n, seq_len):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, VOCAB, (n, seq_len), generator=generator)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        ids = self.ids[i]
        return {"input_ids": ids, "labels": ids.clone()}


torch.manual_seed(0)
config = GPT2Config(
    vocab_size=VOCAB,
    n_positions=args.seq_len,
    n_embd=32,
    n_layer=2,
    n_head=2,
    bos_token_id=0,
    eos_token_id=0,
)
model = GPT2LMHeadModel(config)

with tempfile.TemporaryDirectory() as output_dir:
    training_args = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=args.batch_size,
        max_steps=args.max_steps,
        learning_rate=1e-3,
        report_to="none",
        save_strategy="steps" if args.save_steps else "no",
        save_steps=args.save_steps or 500,
        eval_strategy="steps" if args.eval_steps else "no",
        eval_steps=args.eval_steps or None,
        per_device_eval_batch_size=args.batch_size,
        logging_strategy="no",
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=RandomTokens(512, args.seq_len),
        eval_dataset=RandomTokens(64, args.seq_len) if args.eval_steps else None,
    )
    trainer.train()
print("training finished")
