"""Syncs made inside a library: the setting that controls one, where it is known for sure.

A sync event made by library code carries the library frames between the operation and the
user's line (``library_calls``: ``package/path.py:function``, innermost first) and the library's
statement (``via_source``). A rule below recognises one library code path by those and names the
setting that turns it off or makes it rarer. Each rule was read off the library's own source, in
the versions named; a code path no rule knows gets no setting rather than a guess.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class LibrarySetting:
    """A library code path that syncs, and the setting that controls it."""

    #: Any of these ``package/path.py:function`` among the event's library frames.
    calls: tuple[str, ...]
    setting: str
    #: Text that must also be in the library's statement, when one function syncs in several
    #: places and only one of them is controlled by the setting.
    statement: str | None = None


_LIGHTNING_CONNECTOR = "trainer/connectors/logger_connector"

#: The known settings (read in transformers 5.23, pytorch_lightning 2.6.6, torch 2.13; the
#: ``lightning`` package ships the same Lightning sources under ``lightning/pytorch``).
SETTINGS: tuple[LibrarySetting, ...] = (
    LibrarySetting(
        calls=("transformers/trainer.py:_inner_training_loop",),
        statement="logging_nan_inf_filter",
        setting=(
            "The Hugging Face Trainer checks each step's loss for NaN/inf "
            "(`torch.isnan(loss) or torch.isinf(loss)`), which waits for the device. "
            "`TrainingArguments(logging_nan_inf_filter=False)` turns the check off (a NaN/inf "
            "loss then enters the logged running loss instead of being replaced)."
        ),
    ),
    LibrarySetting(
        calls=tuple(
            f"{package}/{_LIGHTNING_CONNECTOR}/result.py:metrics"
            for package in ("pytorch_lightning", "lightning/pytorch")
        ),
        setting=(
            "Lightning turns every value logged with `self.log(..., prog_bar=True)` (per step, "
            "the default in `training_step`) into a Python number each step, for the progress "
            "bar. Log it with `prog_bar=False`, or with `on_step=False, on_epoch=True` if the "
            "epoch value is enough."
        ),
    ),
    LibrarySetting(
        calls=tuple(
            f"{package}/{_LIGHTNING_CONNECTOR}/logger_connector.py:log_metrics"
            for package in ("pytorch_lightning", "lightning/pytorch")
        ),
        setting=(
            "Lightning turns every logged value into a Python number when it writes to the "
            "loggers, every `log_every_n_steps` steps: raise `Trainer(log_every_n_steps=...)`."
        ),
    ),
    LibrarySetting(
        calls=(
            "torch/distributions/distribution.py:__init__",
            "torch/distributions/distribution.py:_validate_sample",
        ),
        setting=(
            "torch.distributions validates a distribution's parameters (and the values given to "
            "`log_prob`) and waits for the result; validation is on unless Python runs with "
            "`-O`. Pass `validate_args=False` to the distribution, or call "
            "`torch.distributions.Distribution.set_default_validate_args(False)` once."
        ),
    ),
)


def library_setting(library_calls: Iterable[str], via_source: str | None) -> str | None:
    """The setting that controls a library's sync, or ``None`` when none is known."""
    calls = set(library_calls)
    for rule in SETTINGS:
        if calls.isdisjoint(rule.calls):
            continue
        if rule.statement is not None and rule.statement not in (via_source or ""):
            continue
        return rule.setting
    return None
