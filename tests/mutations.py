"""The mutation check: each rule broken on purpose must fail a test (docs/architecture.md, "Test
tiers"). A test that passes with its rule inverted checks nothing about that rule; three such
bugs once survived the unit tier (issue 38).

Each mutation below replaces a rule's text in a copy of ``src/torchdoctor`` (the working tree is
never edited), runs the tests named beside it against the copy (first on the code as it is, which
must pass), and says ``killed`` when they fail and ``SURVIVED`` when they pass. A rule's text
that is no longer in its file is ``stale``: update the row with the rule. Add a row when a test is
written for a rule, and check it is killed.

    .venv/bin/python tests/mutations.py            # every mutation
    .venv/bin/python tests/mutations.py compare    # those whose name holds "compare"

Exit status 0 when every mutation is killed, 1 otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "torchdoctor"


@dataclass(frozen=True)
class Mutation:
    """One rule broken: ``rule``, found once in ``path`` (under src/torchdoctor), becomes
    ``broken``, and one of ``tests`` (pytest node ids or files) must then fail."""

    name: str
    path: str
    rule: str
    broken: str
    tests: tuple[str, ...]


MUTATIONS = (
    Mutation(
        "firmness: resamples that disagree leave the verdict firm",
        "analysis/firmness.py",
        "if agreed < FIRM_AGREEMENT:",
        "if False:",
        ("tests/unit/analysis/test_firmness.py",),
    ),
    Mutation(
        "firmness: torch's threads never wait for cores",
        "analysis/firmness.py",
        "if env.torch_threads <= env.cpu_logical - others:",
        "if True:",
        ("tests/unit/analysis/test_firmness.py",),
    ),
    Mutation(
        "whole run: a save's work before a late look is the checkpoint's",
        "capture/_whole.py",
        "            self.sampler.sample(since=max(t or 0 for t in exact))",
        "            pass",
        ("tests/unit/capture/test_whole_accounts.py",),
    ),
    Mutation(
        "whole run: the look as a save begins counts from the end of what was timed",
        "capture/_whole.py",
        "            self.sampler.sample(since=max(t or 0 for t in exact))",
        "            self.sampler.sample()",
        ("tests/unit/capture/test_whole_accounts.py",),
    ),
    Mutation(
        "whole run: a save before the first step makes no save function",
        "capture/_whole.py",
        "        if self.last_step_ns is not None:",
        "        if True:",
        ("tests/unit/capture/test_whole_accounts.py",),
    ),
    Mutation(
        "whole run: a function that ran an evaluation pass is not a save function",
        "capture/_whole.py",
        "            skip = (self.loop_codes, sampler.save_codes, sampler.pass_codes)",
        "            skip = (self.loop_codes, sampler.save_codes)",
        ("tests/unit/capture/test_whole_accounts.py",),
    ),
    Mutation(
        "whole run: the checkpoint's line is its first save's",
        "capture/_whole.py",
        "        checkpoint.where = max(sites, key=sites.__getitem__)",
        "        checkpoint.where = checkpoint.where or site",
        ("tests/unit/capture/test_whole_accounts.py",),
    ),
    Mutation(
        "capture cost: a timed step's clock reads counted for every step it stands for",
        "capture/_cost.py",
        "        reads = min(pairs * self.read_ns, max(cost_ns, 0))",
        "        reads = 0",
        ("tests/unit/capture/test_capture_cost.py",),
    ),
    Mutation(
        "the demo on a busy machine: its headline measured slower is slower",
        "cli/demo/runner.py",
        "    if most is None:\n        return side",
        "    if True:\n        return side",
        ("tests/unit/test_demo_busy.py",),
    ),
    Mutation(
        "the demo on a busy machine: a gain is told without its moment",
        "cli/demo/runner.py",
        '        return replace(side, notes=[*side.notes, moment + "that moment\'s"])',
        "        return side",
        ("tests/unit/test_demo_busy.py",),
    ),
    Mutation(
        "fix on a busy machine: rewrites read slower are written on their losses",
        "patch/_measure.py",
        "        dropped = kept - kept_numeric if why else kept",
        "        dropped = kept",
        ("tests/unit/patch/test_patched_run.py",),
    ),
    Mutation(
        "fix on a busy machine: a loader's remedy measured slower is slower",
        "analysis/firmness.py",
        "    return max(known) if known and max(known) >= BUSY_CORES else None",
        "    return None",
        ("tests/unit/patch/test_patched_run.py",),
    ),
    Mutation(
        "fix on a busy machine: the doubt is said of every remedy, not only the cores' ones",
        "patch/_busy.py",
        "if most is None or (not rewrites and not CORE_REMEDIES & set(remedies)):",
        "if most is None:",
        ("tests/unit/patch/test_patched_run.py",),
    ),
    Mutation(
        "fix on a busy machine: a gain of rewrites alone is told as theirs",
        "patch/_busy.py",
        "    if doubt and alone and judged.judgement == IMPROVED:",
        "    if False:",
        ("tests/unit/patch/test_patched_run.py",),
    ),
    Mutation(
        "fix on a busy machine: rewrites left out of a slower patch are said slower, the load unsaid",
        "patch/_measure.py",
        '"with it the patch measured slower" + load_aside(loads)',
        '"with it the patch measured slower"',
        ("tests/unit/patch/test_patched_run.py",),
    ),
    Mutation(
        "fix on a busy machine: a loader's gain is given as any other's",
        "patch/_busy.py",
        "    if most is None or not CORE_REMEDIES & set(remedies):\n        return []",
        "    if True:\n        return []",
        ("tests/unit/patch/test_patched_run.py",),
    ),
    Mutation(
        "fix on a busy machine: a patch of rewrites alone measured slower is slower",
        "patch/_measure.py",
        "busy_patch(verdict.judged, kept, loads, kept_numeric)",
        "busy_patch(verdict.judged, kept, loads)",
        ("tests/unit/patch/test_patched_run.py",),
    ),
    Mutation(
        "lever bounds: the parts a lever leaves alone may move as far as they like",
        "analysis/lever_bounds.py",
        "    if moved > margin:",
        "    if False:",
        ("tests/unit/analysis/test_lever_bounds.py",),
    ),
    Mutation(
        "lever bounds: a gain past the lever's parts is allowed",
        "analysis/lever_bounds.py",
        "limit = ceiling * (1.0 + allowance)",
        "limit = ceiling * 100.0",
        ("tests/unit/analysis/test_lever_bounds.py",),
    ),
    Mutation(
        "lever bounds: pairs corrected however thin their untouched parts",
        "analysis/lever_bounds.py",
        "rest < GAUGE_SHARE * step",
        "rest <= 0",
        ("tests/unit/analysis/test_lever_bounds.py",),
    ),
    Mutation(
        "lever bounds: pairs corrected whatever the data wait",
        "analysis/lever_bounds.py",
        "wait > WAIT_SHARE * step",
        "wait < 0",
        ("tests/unit/analysis/test_lever_bounds.py",),
    ),
    Mutation(
        "lever bounds: the lever's own effect on the untouched parts taken for load",
        "analysis/lever_bounds.py",
        "return Corrected([t * m / common for t, m in zip(timed, moved)], common)",
        "return Corrected([t * m for t, m in zip(timed, moved)], common)",
        ("tests/unit/analysis/test_lever_bounds.py",),
    ),
    Mutation(
        "lever bounds: a common quickening of the untouched parts credited to the lever",
        "analysis/lever_bounds.py",
        "low = min(corrected.pairs) * min(1.0, corrected.common)",
        "low = min(corrected.pairs)",
        ("tests/unit/analysis/test_lever_bounds.py",),
    ),
    Mutation(
        "lever bounds: a common slowing of the untouched parts charged to the lever",
        "analysis/lever_bounds.py",
        "high = max(corrected.pairs) * max(1.0, corrected.common)",
        "high = max(corrected.pairs)",
        ("tests/unit/analysis/test_lever_bounds.py",),
    ),
    Mutation(
        "lever bounds: corrected pairs held to a ceiling on their figure as timed",
        "analysis/lever_bounds.py",
        "if speedup > limit and (not corrected or moved > margin):",
        "if speedup > limit:",
        ("tests/unit/analysis/test_lever_bounds.py", "tests/unit/patch/test_patched_run.py"),
    ),
    Mutation(
        "lever bounds: what corrected pairs credit never held to the ceiling",
        "analysis/lever_bounds.py",
        "if credited is not None and credited > limit:",
        "if False:",
        ("tests/unit/patch/test_patched_run.py",),
    ),
    Mutation(
        "fix: corrected rounds' figure taken as timed (one loaded round lifts it)",
        "patch/_measure.py",
        "judged = judge_rounds(corrected, allowance)",
        "judged = replace(judge_rounds(corrected, allowance), speedup=verdict.judged.speedup)",
        ("tests/unit/patch/test_patched_run.py",),
    ),
    Mutation(
        "lever bounds: one loaded pair carries the common move (a geometric mean)",
        "analysis/lever_bounds.py",
        "    common = _middle(moved)",
        "    common = _across(moved)",
        ("tests/unit/analysis/test_lever_bounds.py",),
    ),
    Mutation(
        "lever bounds: the middle of an even count of moves taken by their arithmetic mean",
        "analysis/lever_bounds.py",
        "(logs[half - 1] + logs[half]) / 2)",
        "math.log((math.exp(logs[half - 1]) + math.exp(logs[half])) / 2))",
        ("tests/unit/analysis/test_lever_bounds.py",),
    ),
    Mutation(
        "firmness: a thread that waited for cores ignored where the load went unmeasured",
        "analysis/firmness.py",
        "if not (busy or unseen_load_waited(record)) or",
        "if not busy or",
        ("tests/unit/analysis/test_firmness.py",),
    ),
    Mutation(
        "firmness: one preemption in a window of milliseconds makes a verdict not firm",
        "analysis/firmness.py",
        "        and waits.training_waited_s >= UNSEEN_MIN_WAIT_S\n",
        "",
        ("tests/unit/analysis/test_firmness.py",),
    ),
    Mutation(
        "supervisor: a Ctrl-C the script ignores is waited on until the bound",
        "process/_processes.py",
        "answer_by = time.monotonic() + INTERRUPT_GRACE_S",
        "answer_by = None",
        (
            "tests/integration/test_supervised.py"
            "::test_a_script_that_ignores_ctrl_c_is_stopped_after_the_grace",
        ),
    ),
    Mutation(
        "memory split: a saved storage known while the view that brought it lives",
        "capture/_memory_split.py",
        "self._seen[key] = weakref.ref(storage)",
        "self._seen[key] = weakref.ref(tensor)",
        ("tests/unit/capture/test_memory_split.py",),
    ),
    Mutation(
        "fix: a bounded remedy's pairs are never corrected",
        "patch/_measure.py",
        "    if corrected is None:\n",
        "    if True:\n",
        ("tests/unit/patch/test_patched_run.py",),
    ),
    Mutation(
        "trace ranks: a rank's own step names decide its GPU view",
        "analysis/trace_ranks.py",
        "(len(r.step_names) >= 2) != (len(names) >= 2)",
        "False",
        ("tests/unit/analysis/test_trace_ranks.py",),
    ),
    Mutation(
        "trace ranks: a worker that ended without its result loses its file",
        "analysis/trace_ranks.py",
        "        if r is None:\n            r = analyse_file(p, include_last_step, c)",
        "        if False:\n            r = analyse_file(p, include_last_step, c)",
        ("tests/unit/analysis/test_trace_ranks.py",),
    ),
    Mutation(
        "trace ranks: a worker imports the modules of the current directory",
        "trace/_workers.py",
        "if not getattr(sys.flags, 'safe_path', False): del sys.path[0]\\n",
        "\\n",
        ("tests/unit/analysis/test_trace_ranks.py", "tests/unit/trace/test_trace_split.py"),
    ),
    Mutation(
        "trace ranks: a worker outlives the process that started it",
        "trace/_workers.py",
        "        while os.getppid() == parent:",
        "        while True:",
        ("tests/unit/analysis/test_trace_ranks.py",),
    ),
    Mutation(
        "trace reader: a slice of events ends on its boundary's ','",
        "trace/_reader.py",
        "self._pos = cut + 2",
        "self._pos = cut + 1",
        ("tests/unit/trace/test_trace_reader.py",),
    ),
    Mutation(
        "trace reader: the one-by-one mark stays where the old buffer put it",
        "trace/_reader.py",
        "self._one_by_one_until -= self._pos",
        "pass",
        ("tests/unit/trace/test_trace_reader.py",),
    ),
    Mutation(
        "gpu view: a correlation two kept host calls carry is joined once",
        "analysis/trace_gpu.py",
        "repeated[c] = repeated.get(c, keep[h]) + keep[i]",
        "pass",
        ("tests/unit/analysis/test_trace_analysis.py",),
    ),
    Mutation(
        "intervals: rows out of order are merged as they come",
        "analysis/_intervals.py",
        "return sorted(rows, key=starts.__getitem__)",
        "return rows",
        ("tests/unit/analysis/test_intervals.py",),
    ),
    Mutation(
        "intervals: a window's spans are found from the first that ends after its start",
        "analysis/_intervals.py",
        "range(bisect_right(ends, start), len(ends))",
        "range(bisect_right(ends, start) + 1, len(ends))",
        ("tests/unit/analysis/test_intervals.py",),
    ),
    Mutation(
        "intervals: the overlap of two span sets steps past the one that ends first",
        "analysis/_intervals.py",
        "if a_e[i] < b_e[j]:",
        "if a_e[i] > b_e[j]:",
        ("tests/unit/analysis/test_intervals.py",),
    ),
    Mutation(
        "syncs: a container that reaches a sync on its thread encloses it",
        "analysis/trace_host.py",
        "on_thread[first] <= ts[r] + dur[r]",
        "on_thread[first] <= ts[r] + dur[r] / 2",
        ("tests/unit/analysis/test_trace_analysis.py",),
    ),
    Mutation(
        "split trace: the second part's rows follow the first's events",
        "trace/_split.py",
        '"index": lambda: (i + first.events for i in r.index),',
        '"index": lambda: (i for i in r.index),',
        ("tests/unit/trace/test_trace_split.py",),
    ),
    Mutation(
        "split trace: the worker's text ids are numbered on from this process's",
        "trace/_split.py",
        "ids.setdefault(value, FIRST_ID - len(ids))",
        "ids.setdefault(value, FIRST_ID - 1 - len(ids))",
        ("tests/unit/trace/test_trace_split.py",),
    ),
    Mutation(
        "split trace: ids counted past a narrow column widen the columns",
        "trace/_split.py",
        "if any(v >= 1 << (8 * getattr(t, c).itemsize) for c, v in largest.items()):",
        "if False:",
        ("tests/unit/trace/test_trace_split.py",),
    ),
    Mutation(
        "split trace: the first part ends at the cut, after a separator",
        "trace/_reader.py",
        "self.stopped = True  # at ``stop``",
        "self.stopped = False  # at ``stop``",
        ("tests/unit/trace/test_trace_split.py",),
    ),
    Mutation(
        "trace tables: a value past the narrow columns widens them",
        "trace/_tables.py",
        'if values.typecode != "q":',
        "if False:",
        ("tests/unit/trace/test_trace_reader.py",),
    ),
    Mutation(
        "lever bounds: runs taken in pairs are bounded on their pooled steps",
        "analysis/lever_bounds.py",
        "if len(paired) >= 2",
        "if False",
        ("tests/unit/analysis/test_lever_bounds.py",),
    ),
    Mutation(
        "straggler: its interval is of means, not medians",
        "analysis/distributed.py",
        "low, _ = interval(samples[id(slow)], pooled, statistic=statistics.median)",
        "low, _ = interval(samples[id(slow)], pooled)",
        ("tests/unit/analysis/test_job_verdict.py",),
    ),
    Mutation(
        "join: ranks that ran out together read as uneven inputs",
        "capture/_ranks.py",
        "if some and (not every or first != last):",
        "if some:",
        ("tests/unit/capture/test_job_guard_rules.py",),
    ),
    Mutation(
        "join: a rank held for Join whose heartbeat still counts steps read as stalled",
        "process/rank_endings.py",
        "return state.stepped_at is not None and at - state.stepped_at < stacks.STALL_S",
        "return False",
        ("tests/unit/test_launch_faults.py",),
    ),
    Mutation(
        "join: Ctrl-C of a job held after an uneven join read as the measurement done",
        "process/ending/_script.py",
        "(end.phase == phase_names.DONE and not end.uneven_join)",
        "(end.phase == phase_names.DONE)",
        ("tests/unit/process/test_ending.py",),
    ),
    Mutation(
        "whole: a rebuilt training loader's batches read as an evaluation's",
        "capture/_whole.py",
        "if rebuilt is not None and rebuilt[0] == self._last_key != self.train_key:",
        "if False:",
        ("tests/unit/capture/test_whole_accounts.py",),
    ),
    Mutation(
        "whole: the training data read under no_grad taken for a new epoch",
        "capture/_whole.py",
        "if new_epoch and torch.is_grad_enabled():",
        "if new_epoch:",
        ("tests/unit/capture/test_whole_accounts.py",),
    ),
    Mutation(
        "whole: a DataLoader built anew each epoch told persistent_workers, which dies with it",
        "analysis/whole_run.py",
        "if summary.loaders_built > 1:",
        "if False:",
        ("tests/unit/analysis/test_whole_rules.py",),
    ),
    Mutation(
        "whole: a slow step's stall at one line of the user's not named there",
        "analysis/whole_run.py",
        "where = top if top[1] and top_s * 2 >= slow > 0 else None",
        "where = None",
        ("tests/unit/analysis/test_whole_rules.py",),
    ),
    Mutation(
        "saves: a checkpoint written while the replicas drift",
        "capture/_job_guards.py",
        "if ranks.drifting and (",
        "if False and (",
        ("tests/unit/capture/test_job_guard_rules.py",),
    ),
    Mutation(
        "fsdp2: the collectives torch issued not counted as communication",
        "analysis/distributed.py",
        "return (r.collectives_ms or 0.0) + (r.torch_collectives_ms or 0.0)",
        "return r.collectives_ms",
        ("tests/unit/analysis/test_job_verdict.py",),
    ),
    Mutation(
        "fsdp2: an asynchronous call timed where it is queued, not waited for",
        "capture/_issued.py",
        '        if kwargs.get("async_op") and result is not None:',
        "        if False:",
        ("tests/unit/capture/test_issued_collectives.py",),
    ),
    Mutation(
        "compare: a gain the load's direction explains given anyway",
        "analysis/firmness.py",
        "{IMPROVED: a_busier, REGRESSED: not a_busier, NO_CHANGE: True}",
        "{IMPROVED: not a_busier, REGRESSED: not a_busier, NO_CHANGE: True}",
        ("tests/unit/analysis/test_compare.py",),
    ),
    Mutation(
        "firmness: time measured waiting for a core never counts",
        "analysis/firmness.py",
        "if share < WAITING_SHARE:",
        "if True:",
        ("tests/unit/analysis/test_firmness.py",),
    ),
    Mutation(
        "firmness: measured waiting asked of compute-bound verdicts only",
        "analysis/firmness.py",
        "if thread_waits(record) is not None or verdict.kind == COMPUTE_BOUND",
        "if verdict.kind == COMPUTE_BOUND",
        ("tests/unit/analysis/test_firmness.py",),
    ),
    Mutation(
        "compare: a regression blamed on any waiting, however little",
        "analysis/firmness.py",
        "made = change > 0 and extra >= WAIT_EXPLAINS * change",
        "made = change > 0",
        ("tests/unit/analysis/test_compare.py",),
    ),
    Mutation(
        "compare: no change doubted only when B waited more",
        "analysis/firmness.py",
        "made = abs(extra) >= allowance * min(sa, sb)",
        "made = extra >= allowance * min(sa, sb)",
        ("tests/unit/analysis/test_compare.py",),
    ),
    Mutation(
        "compare: waiting doubted across a change of threads",
        "analysis/firmness.py",
        "if wa is None or wb is None or not same_threads(a, b) or scale <= 0:",
        "if wa is None or wb is None or scale <= 0:",
        ("tests/unit/analysis/test_compare.py",),
    ),
    Mutation(
        "fix: a tool's instruction comment left out of a changed line",
        "patch/_comments.py",
        "if codes is None or code.rstrip() in codes or PRAGMA.match(comment):",
        "if codes is None or code.rstrip() in codes:",
        ("tests/unit/patch/test_comments.py",),
    ),
    Mutation(
        "fix: a comment naming what was added kept beside it",
        "patch/_comments.py",
        "return not any(re.search(",
        "return True or not any(re.search(",
        ("tests/unit/patch/test_comments.py",),
    ),
    Mutation(
        "probe: autocast asked of the CPU before the run's device is known",
        "capture/_script_state.py",
        "device_type = device.type if device is not None else parameter_device_type(module)",
        'device_type = device.type if device is not None else "cpu"',
        ("tests/unit/capture/test_script_state.py",),
    ),
    Mutation(
        "ending: out of memory decided as any other error",
        "process/ending/_script.py",
        "if end.ended == RAISED and end.out_of_memory is not None:",
        "if False:",
        ("tests/unit/process/test_out_of_memory.py",),
    ),
    Mutation(
        "ending: a device's out-of-memory message not recognised",
        "process/ending/_memory.py",
        '"RuntimeError" in names and any(w in lowered for w in DEVICE_WORDS)',
        "False",
        ("tests/unit/process/test_out_of_memory.py",),
    ),
    Mutation(
        "verdict: an out-of-memory run told speed first",
        "analysis/short_run.py",
        "if record.status != OUT_OF_MEMORY or verdict.kind == UNKNOWN:",
        "if True:",
        ("tests/unit/process/test_out_of_memory.py",),
    ),
    Mutation(
        "job: a rank out of memory read as one whose data ran out",
        "process/rank_endings.py",
        "elif status in (SCRIPT_ERROR, OUT_OF_MEMORY) and lines:",
        "elif status == SCRIPT_ERROR and lines:",
        ("tests/unit/process/test_out_of_memory.py",),
    ),
    Mutation(
        "syncs: the script's op called by the watcher's mode counts as torchdoctor's failure",
        "capture/_patch.py",
        "@passes_through\ndef call_op(",
        "def call_op(",
        ("tests/integration/test_faults.py::test_fault[run-script-op-fails-under-the-sync-watch]",),
    ),
    Mutation(
        "held: a tensor counted on the memory it is not on",
        "capture/_held.py",
        'if (tensor.device.type == "cpu") != (memory == "host")',
        "if False",
        ("tests/unit/capture/test_held.py",),
    ),
    Mutation(
        "waiting: torchdoctor's own threads counted as the script's",
        "capture/_waiting.py",
        "if pid == self.pid and tid in ours:",
        "if False:",
        ("tests/unit/capture/test_waiting.py",),
    ),
    Mutation(
        "compare: an unmeasured load read as the busier",
        "analysis/firmness.py",
        "a_busier = b_others is None or",
        "a_busier = a_others is None or",
        ("tests/unit/analysis/test_compare.py",),
    ),
    Mutation(
        "flops: a recurrent kernel judged by its time alone",
        "analysis/trials.py",
        'any(u.get("share") is None or u.get("recurrent") for u in flops.uncounted)',
        'any(u.get("share") is None for u in flops.uncounted)',
        ("tests/unit/analysis/test_trial_judgement.py",),
    ),
    Mutation(
        "fix: a **kwargs entry changed whatever value the run took",
        "patch/_kwargs.py",
        "if current is None or name not in current or _value(el) == current[name]",
        "if True",
        ("tests/unit/patch/test_edits.py",),
    ),
    Mutation(
        "fix: a branch of `{...} if c else {...}` taken whatever the run's values",
        "patch/_kwargs.py",
        "(_value(given[key]) if key in given else default) == current[key]",
        "True",
        ("tests/unit/patch/test_edits.py",),
    ),
    Mutation(
        "fix: an item assignment of the **kwargs dict not refused",
        "patch/_kwargs.py",
        '            return [], f"{variable}[...] at line {source.line_of(node)} may set it"',
        "            pass",
        ("tests/unit/patch/test_edits.py",),
    ),
    Mutation(
        "compare: a gain judged from the largest pair, not the smallest",
        "analysis/compare.py",
        "faster = lo >= 1.0 + allowance",
        "faster = hi >= 1.0 + allowance",
        ("tests/unit/analysis/test_compare.py",),
    ),
    Mutation(
        "compare: a loss judged from the smallest pair, not the largest",
        "analysis/compare.py",
        "slower = hi <= 1.0 / (1.0 + allowance)",
        "slower = lo <= 1.0 / (1.0 + allowance)",
        ("tests/unit/analysis/test_compare.py",),
    ),
    Mutation(
        "syncs: one_hot given num_classes a data-dependent shape",
        "capture/_sync_rules.py",
        "syncs = classes == -1",
        "syncs = True",
        ("tests/unit/capture/test_sync_corpus.py",),
    ),
    Mutation(
        "syncs: the three-argument torch.where a data-dependent shape",
        "capture/_sync_rules.py",
        "syncs = len(args) + len(kwargs) == 1",
        "syncs = True",
        ("tests/unit/capture/test_sync_corpus.py",),
    ),
    Mutation(
        "syncs: repeat_interleave given output_size a data-dependent shape",
        "capture/_sync_rules.py",
        'syncs = isinstance(repeats, torch.Tensor) and kwargs.get("output_size") is None',
        "syncs = isinstance(repeats, torch.Tensor)",
        ("tests/unit/capture/test_sync_corpus.py",),
    ),
    Mutation(
        "whole run: persistent workers told to persist at the epoch boundary",
        "analysis/whole_run.py",
        "    if loader.persistent_workers:\n        return None\n",
        "",
        ("tests/unit/capture/test_whole_accounts.py", "tests/unit/analysis/test_whole_rules.py"),
    ),
    Mutation(
        "whole run: a drift found in a run too short to tell one",
        "analysis/whole_course.py",
        "long_enough = body[-1].end_s - body[0].end_s >= DRIFT_SPAN_S",
        "long_enough = True",
        ("tests/unit/capture/test_whole_accounts.py",),
    ),
    Mutation(
        "judged speedup: a gain that does not clear the allowance",
        "record/_judged.py",
        "if low > 1.0 and speedup >= 1.0 + allowance and faster:",
        "if low > 1.0 and speedup >= 1.0 and faster:",
        ("tests/unit/record/test_judged.py", "tests/unit/analysis/test_trial_judgement.py"),
    ),
    Mutation(
        "judged speedup: a v2 trial judged without its allowance",
        "record/_serial.py",
        'allowance = detail.pop("allowance", 0.0)',
        'allowance = detail.pop("allowance", 0.0) and 0.0',
        ("tests/unit/record/test_record_v2.py",),
    ),
    Mutation(
        "levers: the table loses a lever the trials phase pulls",
        "record/lever_names.py",
        'LeverFacts(COMPILE, "model.compile()", _FORWARD_AND_BACKWARD, COMPILE),',
        "",
        ("tests/unit/test_lever_table.py",),
    ),
    Mutation(
        "levers: fix no longer writes the foreach lever",
        "record/lever_names.py",
        """LeverFacts(FOREACH, "the optimizer's multi-tensor step", ("optimizer",), "optimizer")""",
        """LeverFacts(FOREACH, "the optimizer's multi-tensor step", ("optimizer",))""",
        ("tests/unit/test_lever_table.py",),
    ),
    Mutation(
        "ending: the verdict derived before the status is set",
        "process/ending/_settle.py",
        "    record.status = ending.status\n    if derive:\n        summarise(record)",
        "    if derive:\n        summarise(record)\n    record.status = ending.status",
        ("tests/unit/process/test_ending.py", "tests/unit/process/test_outcome.py"),
    ),
    Mutation(
        "ending: a lost peer before torchdoctor's own failure",
        "process/ending/_script.py",
        "    if end.internal_error:\n",
        "    if end.internal_error and not end.peer_lost:\n",
        ("tests/unit/process/test_ending.py",),
    ),
    Mutation(
        "ending: a script that caught the stop keeps its own words for it",
        "process/ending/_stop.py",
        "kept = [] if child.cause in OWN_CAUSES else list(child.notes)",
        "kept = list(child.notes)",
        ("tests/unit/process/test_ending.py",),
    ),
    Mutation(
        "ending: a job's worst rank taken from the best",
        "analysis/distributed.py",
        "return min(known, key=STATUS_PRECEDENCE.index)",
        "return max(known, key=STATUS_PRECEDENCE.index)",
        ("tests/unit/process/test_ending.py",),
    ),
    Mutation(
        "evaluation: a no-grad call in training mode (an RL rollout) is evaluation",
        "capture/_loop_shapes.py",
        'if boundary in (None, "forward") or module.training or torch.is_grad_enabled():',
        'if boundary in (None, "forward") or torch.is_grad_enabled():',
        ("tests/unit/analysis/test_evaluation_in_step.py",),
    ),
    Mutation(
        "evaluation: a teacher no optimizer updates is evaluation",
        "capture/_loop_shapes.py",
        'return optimizers is None or boundary != "optimizer" or optimizers.trains(module)',
        "return True",
        ("tests/unit/analysis/test_evaluation_in_step.py",),
    ),
    Mutation(
        "evaluation: it leads the advice however little of the step it takes",
        "analysis/compute_advice.py",
        "if evaluation >= EVALUATION_LEADS:",
        "if evaluation > 0:",
        ("tests/unit/analysis/test_evaluation_in_step.py",),
    ),
    Mutation(
        "syncs: a sync on a host tensor that met the device is host work",
        "capture/_sync_ops.py",
        'return self.reached_model_unmoved or (self.met_device and self.kind != "batch")',
        "return self.reached_model_unmoved",
        ("tests/unit/capture/test_syncs_capture.py",),
    ),
    Mutation(
        "syncs: a value handed to a logging call is used at once",
        "analysis/sync_uses.py",
        "if name and name not in _KEEPING and name not in _READS:",
        "if name and name not in _READS:",
        ("tests/unit/analysis/test_syncs_analysis.py",),
    ),
    Mutation(
        "syncs: one read with grad on among the window's makes them all an evaluation's",
        "analysis/syncs.py",
        'all(e.get("grad") is False for e in group)',
        'any(e.get("grad") is False for e in group)',
        ("tests/unit/analysis/test_syncs_analysis.py",),
    ),
    Mutation(
        "fix: a rewrite is said gone whatever the sync finder finds on the patched script",
        "patch/_measure.py",
        "    if not left:\n        return GONE\n",
        "    return GONE\n",
        ("tests/unit/patch/test_syncs.py",),
    ),
    Mutation(
        "fix: an inline constant's move is left out (a buffer a never-moved loss copies each step)",
        "patch/_syncs.py",
        "source.plan(key, statement, _insert_before(before), wraps=True)",
        "pass",
        ("tests/unit/patch/test_syncs.py",),
    ),
    Mutation(
        "fix: a config class's construction that passes the field is ignored",
        "patch/_followed.py",
        "        given = keyword(call, dest)\n",
        "        given = None\n",
        ("tests/unit/patch/test_edits.py",),
    ),
    Mutation(
        "fix: a partial's call keyword is not the one that wins",
        "patch/_remedies.py",
        "given = {k: v for k, v in settings.items() if keyword(site, k) is not None}",
        "given = {}",
        ("tests/unit/patch/test_edits.py",),
    ),
    Mutation(
        "memory: a parameter saved for backward counted as an activation",
        "capture/_memory_split.py",
        "if key and (known is None or known() is None) and key not in self._params:",
        "if key and (known is None or known() is None):",
        ("tests/unit/capture/test_memory_split.py",),
    ),
    Mutation(
        "memory: a storage saved twice counted twice",
        "capture/_memory_split.py",
        "if key and (known is None or known() is None) and key not in self._params:",
        "if key and key not in self._params:",
        ("tests/unit/capture/test_memory_split.py",),
    ),
    Mutation(
        "memory: a list that grew by a graph is not a kept graph",
        "capture/_kept_graphs.py",
        "now[1] is earlier[1] and now[2] > earlier[2]",
        "now[1] is earlier[1] and now[2] > earlier[2] + 10",
        ("tests/unit/capture/test_kept_graphs.py",),
    ),
    Mutation(
        "memory: a graph that reaches the previous step's is not a kept graph",
        "capture/_kept_graphs.py",
        "if node is target:",
        "if node is None:",
        ("tests/unit/capture/test_kept_graphs.py",),
    ),
    Mutation(
        "memory creep: one jump in one half called a creep",
        "analysis/memory_course.py",
        "if rate < RATE_MB * _MB or min(halves) < HALF_SHARE * growth:",
        "if rate < RATE_MB * _MB:",
        ("tests/unit/analysis/test_memory_course.py",),
    ),
    Mutation(
        "memory creep: a warming allocator's resident memory called a creep",
        "analysis/memory_course.py",
        'if course.memory == "host" and growth < HOST_SHARE * course.used[0]:',
        "if False:",
        ("tests/unit/analysis/test_memory_course.py",),
    ),
    Mutation(
        "memory creep: a list that runs out within an epoch is not critical",
        "analysis/memory_course.py",
        "(epoch is not None and epoch >= left)",
        "(epoch is not None and epoch < left)",
        ("tests/unit/analysis/test_memory_course.py",),
    ),
    Mutation(
        "memory creep: a list keeping megabytes of tensors is not seen",
        "capture/_kept_graphs.py",
        "if added_bytes(added) >= TENSORS_MB * 2**20:",
        "if False:",
        ("tests/unit/capture/test_kept_graphs.py",),
    ),
    Mutation(
        "memory creep: a buffer the loop trims called a creep",
        "capture/_kept_graphs.py",
        "return None  # a buffer the loop trims",
        "pass  # a buffer the loop trims",
        ("tests/unit/capture/test_kept_graphs.py",),
    ),
    Mutation(
        "out of memory: the script's own raise MemoryError(...) read as out of memory",
        "process/ending/_memory.py",
        "    if _RAISED.match(statement):",
        "    if False:",
        ("tests/unit/process/test_out_of_memory.py",),
    ),
    Mutation(
        "out of memory: an allocation within the memory called larger than the whole",
        "process/ending/_memory.py",
        "if not oom.asked_bytes or not capacity or oom.asked_bytes <= capacity:",
        "if not oom.asked_bytes or not capacity:",
        ("tests/unit/process/test_out_of_memory.py",),
    ),
    Mutation(
        "checkpoint: what is held at once told without the block rebuilt in the backward",
        "capture/_checkpoint_lever.py",
        'out["held_at_most"] = self.after.activations + self.rebuilt',
        'out["held_at_most"] = self.after.activations',
        ("tests/unit/capture/test_checkpoint_lever.py",),
    ),
    Mutation(
        "out of memory: the batch that fits from the step's bytes, not a sample's",
        "process/ending/_memory.py",
        "fits = int(room // per_sample)",
        "fits = int(room // per_step)",
        ("tests/unit/process/test_out_of_memory.py",),
    ),
    Mutation(
        "memory: the batch's samples read off its last dimension",
        "capture/_memory_split.py",
        "int(first.shape[0]) if first is not None",
        "int(first.shape[-1]) if first is not None",
        ("tests/unit/capture/test_memory_split.py",),
    ),
    Mutation(
        "checkpoint: the chosen blocks are never switched on",
        "capture/_checkpoint_lever.py",
        "self._on = {id(self._blocks[label]) for label in self.chosen}",
        "self._on = set()",
        ("tests/unit/capture/test_checkpoint_lever.py",),
    ),
    Mutation(
        "checkpoint: the blocks that saved the most are left out",
        "capture/_checkpoint_lever.py",
        "if total and nbytes >= SHARE * total",
        "if total and nbytes < SHARE * total",
        ("tests/unit/capture/test_checkpoint_lever.py",),
    ),
    Mutation(
        "checkpoint: a Sequential of single layers is no block",
        "capture/_checkpoint_lever.py",
        "if block is model or not isinstance(block, torch.nn.Sequential):",
        "if True:",
        ("tests/unit/capture/test_checkpoint_lever.py",),
    ),
)


def _pytest(src: Path, tests: tuple[str, ...]) -> int:
    """The tests' exit status, with ``src``'s torchdoctor imported before the installed one."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]),
    }
    found = subprocess.run(
        [sys.executable, "-c", "import torchdoctor; print(torchdoctor.__file__)"],
        env=env, capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    if not found.startswith(str(src)):  # the check would test the tree, not the mutant
        raise SystemExit(f"torchdoctor was imported from {found.strip()}, not from {src}")
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True).returncode


def check(mutation: Mutation, scratch: Path, sound: dict[tuple[str, ...], bool]) -> str:
    """``killed``, ``SURVIVED`` or ``stale: why``, for one mutation; ``sound`` keeps whether each
    set of tests passed on the code as it is."""
    src = scratch / "src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(PACKAGE, src / "torchdoctor", ignore=shutil.ignore_patterns("__pycache__"))
    target = src / "torchdoctor" / mutation.path
    text = target.read_text()
    if text.count(mutation.rule) != 1:
        return f"stale: the rule's text is in {mutation.path} {text.count(mutation.rule)} times"
    if mutation.tests not in sound:
        sound[mutation.tests] = _pytest(src, mutation.tests) == 0
    if not sound[mutation.tests]:
        return "stale: its tests fail on the code as it is"
    target.write_text(text.replace(mutation.rule, mutation.broken))
    status = _pytest(src, mutation.tests)
    if status == 1:  # the tests ran and one failed
        return "killed"
    return "SURVIVED" if status == 0 else f"stale: pytest ended with status {status}"


def main() -> int:
    chosen = [m for m in MUTATIONS if all(word in m.name for word in sys.argv[1:])]
    outcomes: list[str] = []
    sound: dict[tuple[str, ...], bool] = {}
    with tempfile.TemporaryDirectory(prefix="torchdoctor-mutants-") as scratch:
        for mutation in chosen:
            outcome = check(mutation, Path(scratch), sound)
            outcomes.append(outcome)
            print(f"{outcome.split(':')[0]:9} {mutation.name}" + (
                f" ({outcome.split(': ', 1)[1]})" if ":" in outcome else ""
            ))  # fmt: skip
    return 0 if all(o == "killed" for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
