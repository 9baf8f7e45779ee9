"""The report's loader line says where a batch size no ``batch_size`` argument names came from."""

from __future__ import annotations

import dataclasses
import io

import pytest
from rich.console import Console

from paths import DATA
from torchdoctor.record import BATCH_SIZE_ARGUMENT, BATCH_SIZE_MEASURED, RunRecord
from torchdoctor.report.terminal import render


def loader_line(record: RunRecord) -> str:
    console = Console(width=400, file=io.StringIO(), record=True, color_system=None)
    render(record, console)
    (line,) = [x for x in console.export_text().splitlines() if x.lstrip().startswith("loader ")]
    return " ".join(line.split())


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        (BATCH_SIZE_ARGUMENT, "batch_size=6, "),
        (None, "batch_size=6, "),
        (
            "batch_sampler.batch_sampler.batch_size",
            "batch_size=6 (from batch_sampler.batch_sampler.batch_size), ",
        ),
        (BATCH_SIZE_MEASURED, "batch_size=6 (measured: the batches' leading dimension), "),
    ],
)
def test_the_loader_line_names_the_source_of_the_batch_size(source, shown):
    record = RunRecord.load(DATA / "records" / "run_v1.json")
    record.loader = dataclasses.replace(record.loader, batch_size=6, batch_size_source=source)
    assert shown in loader_line(record)
