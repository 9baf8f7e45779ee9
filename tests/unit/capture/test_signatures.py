"""Every callable the capture patches keeps its exact signature: called every way its original
accepts (keywords included, subclasses too), under an installed session, it behaves as the
original. A wrapper that names its first parameter (``module``, ``loader``) breaks a user's
``DistributedDataParallel(module=model)``: Lightning builds DDP that way."""

from __future__ import annotations

import inspect
import multiprocessing.process as mp_process

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DataParallel, DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor.capture._session import CaptureSession
from torchdoctor.options import RunOptions

# (owner, attribute) of every callable the session patches when installed.
PATCHED = [
    (DataLoader, "__init__"),
    (DataLoader, "__iter__"),
    (torch.utils.data.dataloader._BaseDataLoaderIter, "__next__"),
    (torch.Tensor, "to"),
    (torch.Tensor, "cuda"),
    (torch.autograd, "backward"),
    (torch.autograd, "grad"),
    (torch.optim.Optimizer, "__init__"),
    (mp_process.BaseProcess, "start"),
    (DataParallel, "__init__"),
    (DistributedDataParallel, "__init__"),
]


@pytest.fixture
def session():
    options = RunOptions(steps=1000, warmup=1000, sync_steps=0, counterfactuals=False, stop=False)
    session = CaptureSession(options)
    session.install()
    try:
        yield session
    finally:
        session.uninstall()


def test_the_list_covers_every_patch(session):
    # A new patch must be added to PATCHED (and called every way below).
    originals = {id(v) for v in session.patcher._originals.values()}
    for owner, name in PATCHED:
        current = vars(owner).get(name, getattr(owner, name))
        assert session.patcher.original(current) is not current, f"{owner}.{name} not patched"
    assert len(originals) >= len(PATCHED)


@pytest.mark.parametrize("owner,name", PATCHED, ids=[f"{o.__name__}.{n}" for o, n in PATCHED])
def test_no_wrapper_names_a_parameter_a_caller_could_pass_by_keyword(session, owner, name):
    wrapper = getattr(owner, name)
    for param in inspect.signature(wrapper, follow_wrapped=False).parameters.values():
        assert param.kind in (
            param.POSITIONAL_ONLY,
            param.VAR_POSITIONAL,
            param.VAR_KEYWORD,
        ), f"{owner.__name__}.{name} wrapper takes {param.name!r} by keyword"


@pytest.mark.parametrize("owner,name", PATCHED, ids=[f"{o.__name__}.{n}" for o, n in PATCHED])
def test_each_wrapper_shows_its_originals_signature(session, owner, name):
    # Libraries read parameter names off these (Lightning re-creates a DataLoader from the
    # names of DataLoader.__init__'s parameters to inject its sampler).
    wrapper = getattr(owner, name)
    original = session.patcher.original(wrapper)
    assert wrapper is not original
    try:
        expected = inspect.signature(original)
    except ValueError:  # a C method without a signature: the wrapper has none either
        with pytest.raises(ValueError):
            inspect.signature(wrapper)
        return
    assert inspect.signature(wrapper) == expected


def test_ddp_and_data_parallel_built_with_keywords(session):
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        model = nn.Linear(4, 2)
        ddp = DistributedDataParallel(module=model, find_unused_parameters=False)
        assert ddp.module is model

        class MyDDP(DistributedDataParallel):  # a subclass calling super().__init__ by keyword
            def __init__(self, module, **kwargs):
                super().__init__(module=module, **kwargs)

        assert MyDDP(nn.Linear(4, 2), gradient_as_bucket_view=True).module is not None
    finally:
        dist.destroy_process_group()
    assert DataParallel(module=nn.Linear(4, 2)).module is not None


def test_dataloader_every_way(session):
    data = TensorDataset(torch.arange(8.0))
    by_keyword = DataLoader(dataset=data, batch_size=4, shuffle=False)
    positional = DataLoader(data, 4, False)
    mixed = DataLoader(data, batch_size=4, drop_last=True)

    class MyLoader(DataLoader):
        def __init__(self, dataset, **kwargs):
            super().__init__(dataset=dataset, **kwargs)

    sub = MyLoader(data, batch_size=2)
    for loader in (by_keyword, positional, mixed):
        assert [b[0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(list(sub)) == 4
    it = iter(by_keyword)
    assert next(it)[0].tolist() == [0, 1, 2, 3]
    assert it.__next__()[0].tolist() == [4, 5, 6, 7]


def test_tensor_to_and_cuda_every_way(session):
    t = torch.arange(3)
    assert t.to(torch.float64).dtype == torch.float64
    assert t.to(dtype=torch.float32).dtype == torch.float32
    assert t.to("cpu", torch.float16).dtype == torch.float16
    assert t.to(device="cpu", dtype=torch.float64, non_blocking=False, copy=True).dtype == (
        torch.float64
    )
    assert t.to(torch.zeros(1, dtype=torch.float64)).dtype == torch.float64
    # ``tensor=`` is the original's keyword: a wrapper ``def to(tensor, ...)`` once took it
    assert t.to(tensor=torch.zeros(1, dtype=torch.int8)).dtype == torch.int8
    assert torch.Tensor.to(t, torch.float64).dtype == torch.float64
    assert t.to(memory_format=torch.preserve_format) is t
    if not torch.cuda.is_available():
        with pytest.raises((AssertionError, RuntimeError)):
            t.cuda(device=0, non_blocking=True)


def test_autograd_every_way(session):
    w = torch.ones(2, requires_grad=True)
    torch.autograd.backward(tensors=(w * 2).sum())
    torch.autograd.backward([(w * 3).sum()], grad_tensors=[torch.tensor(1.0)], inputs=[w])
    (w * 4).sum().backward(retain_graph=False)
    assert w.grad.tolist() == [9.0, 9.0]
    (g,) = torch.autograd.grad(outputs=(w * 5).sum(), inputs=w, create_graph=False)
    assert g.tolist() == [5.0, 5.0]


def test_optimizers_built_every_way(session):
    params = [nn.Parameter(torch.ones(2))]
    assert torch.optim.SGD(params=params, lr=0.1).defaults["lr"] == 0.1
    assert torch.optim.AdamW(params, 1e-3, weight_decay=0.1).defaults["weight_decay"] == 0.1

    class Plain(torch.optim.Optimizer):  # a custom optimizer calling the base by keyword
        def __init__(self, params, lr=0.1):
            super().__init__(params=params, defaults={"lr": lr})

    assert Plain(params).defaults == {"lr": 0.1}


def _exit_quietly(code=0):
    pass


def test_a_process_started_every_way_is_counted_once(session):
    import multiprocessing

    context = multiprocessing.get_context("fork")
    first = context.Process(target=_exit_quietly, kwargs={"code": 0})
    first.start()
    second = context.Process(target=_exit_quietly, args=(0,))
    mp_process.BaseProcess.start(second)  # unbound, as a subclass's start() would call it
    for process in (first, second):
        process.join(timeout=30)
        assert process.exitcode == 0
    assert session.data.seen["processes_started"] == 2
    notes = [n for n in session.data.notes if n.startswith("the script started")]
    assert len(notes) == 1 and "2 running _exit_quietly (test_signatures.py:" in notes[0]
