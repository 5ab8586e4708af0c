"""`aah sweep --executor ...`: the same grid through submitit's local executor gives the local
executor's results to the last digit; a killed job is submitted again and resumes; bad
settings fail before anything is submitted; without submitit nothing changes locally."""

from __future__ import annotations

import builtins
import json
import os
import signal
import threading
import time

import pytest
from test_sweep import suite_file

from aah import records
from aah.cli import main
from aah.sweep import SweepConfig, read_csv, run_sweep
from aah.sweep.cell_job import CellJob, job_command, job_state, read_job
from aah.sweep.cluster import ClusterOptions

#: every CSV column a rerun cannot change (the timing ones can)
RESULT_KEYS = ("regime", "seed", "val_loss", "val_bpb", "acr", "causal_coverage", "tokens",
               "steps", "seq_len")  # fmt: skip
LOCAL_JOBS = ClusterOptions(executor="submitit-local")


def replay_grid(tmp_path, corpus, out, steps=4):  # type: ignore[no-untyped-def]
    """Two regimes x two seeds, one of them replaying the other's plans (it must wait)."""
    source = json.dumps(str(out / "tiny" / "budget-s{seed}"))
    variants = (
        '[sweep.variants."budget-replay-shuffled"]\n"controller.policy" = "replay-shuffled"\n'
        f'"controller.replay_from" = {source}\n'
    )
    folder = tmp_path / out.name
    folder.mkdir(exist_ok=True)
    path = suite_file(folder, corpus, regimes=("budget-replay-shuffled", "budget"), seeds=(0, 1),
                      steps=steps, variants=variants)  # fmt: skip
    return SweepConfig.from_toml(path)


def results(out) -> list[list[object]]:  # type: ignore[no-untyped-def]
    return [[row[k] for k in RESULT_KEYS] for row in read_csv(out / "tiny.csv")]


def test_submitit_local_gives_the_local_executors_results_to_the_last_digit(
    tmp_path, tiny_corpus, capsys
):
    pytest.importorskip("submitit")
    local, jobs = tmp_path / "local", tmp_path / "jobs"
    run_sweep(replay_grid(tmp_path, tiny_corpus, local), local, progress=False, jobs=2)
    capsys.readouterr()
    outcome = run_sweep(replay_grid(tmp_path, tiny_corpus, jobs), jobs, progress=False, jobs=2,
                        cluster=LOCAL_JOBS)  # fmt: skip
    log = capsys.readouterr().out.splitlines()
    assert (outcome.finished, outcome.total, outcome.left_running) == (4, 4, ())
    assert results(jobs) == results(local) and len(results(local)) == 4

    # The replay cells waited for their sources, and each cell ran as a job with a record.
    def line_of(start: str) -> int:
        return next(i for i, x in enumerate(log) if x.startswith(start))

    for seed in (0, 1):
        replay = line_of(f"tiny: budget-replay-shuffled-s{seed} started")
        assert replay > line_of(f"tiny: budget-s{seed} finished")
    for cell in replay_grid(tmp_path, tiny_corpus, jobs).cells():
        record = read_job(jobs / "tiny", cell)
        assert record is not None and record["executor"] == "submitit-local"
        # the run directory is the local executor's: the same files, the same config
        assert sorted(p.name for p in (jobs / "tiny" / cell.name).iterdir()) == sorted(
            p.name for p in (local / "tiny" / cell.name).iterdir()
        )
    # A second invocation submits nothing.
    again = run_sweep(replay_grid(tmp_path, tiny_corpus, jobs), jobs, progress=False,
                      cluster=LOCAL_JOBS)  # fmt: skip
    assert again.finished == 4 and "started" not in capsys.readouterr().out


def test_a_killed_job_is_submitted_again_and_resumes_to_the_uninterrupted_result(
    tmp_path, tiny_corpus, capsys
):
    pytest.importorskip("submitit")
    psutil = pytest.importorskip("psutil")
    sweep = SweepConfig.from_toml(suite_file(tmp_path, tiny_corpus, regimes=("budget",), steps=40))
    cut, whole = tmp_path / "cut", tmp_path / "whole"
    worker = threading.Thread(
        target=lambda: run_sweep(sweep, cut, progress=False, cluster=LOCAL_JOBS)
    )
    worker.start()
    checkpoint = cut / "tiny" / "budget-s0" / records.CHECKPOINT
    deadline = time.time() + 120
    while time.time() < deadline and not checkpoint.exists():
        time.sleep(0.1)
    assert checkpoint.exists(), "the cell never checkpointed"
    record = read_job(cut / "tiny", sweep.cells()[0])
    assert record is not None
    controller = psutil.Process(int(record["job_id"]))
    for proc in [*controller.children(recursive=True), controller]:  # the job, dead at once
        proc.send_signal(signal.SIGKILL)
    worker.join(timeout=300)
    assert not worker.is_alive()
    out = capsys.readouterr().out
    assert "ended before the cell finished: submitting it again" in out
    log = (cut / "tiny" / "budget-s0" / "train.log").read_text()
    assert "--resume" in log  # the second job resumed from the checkpoint
    run_sweep(sweep, whole, progress=False)
    assert results(cut) == results(whole)


def test_the_cell_job_runs_the_cells_command_and_torchrun_for_several_gpus(tmp_path, tiny_corpus):
    sweep = SweepConfig.from_toml(suite_file(tmp_path, tiny_corpus, regimes=("full",)))
    cell, run_dir = sweep.cells()[0], tmp_path / "run"
    single = job_command(cell, run_dir, gpus=1)
    assert single[1:4] == ["-m", "aah", "train"] and "--config" in single
    multi = job_command(cell, run_dir, gpus=4)
    assert multi[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"]
    assert multi[5:] == ["-m", "aah", *single[3:]]
    # The job runs in-process here (what submitit calls on the node): a finished cell.
    assert CellJob(cell, run_dir)() == 0
    assert (run_dir / records.SUMMARY).exists()
    assert json.loads((run_dir / "cell.json").read_text()) == {"regime": "full", "seed": 0}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (ClusterOptions(executor="pbs"), "executor must be one of local, slurm, submitit-local"),
        (ClusterOptions(partition="gpu"), "--slurm-partition only apply to --executor slurm"),
        (ClusterOptions(gpus_per_cell=2, time_min=5), "--slurm-time, --gpus-per-cell only"),
        (ClusterOptions(slurm={"account": "x"}), r"\[slurm\] table only applies"),
        (ClusterOptions(executor="slurm", time_min=0), "--slurm-time must be an int >= 1"),
        (ClusterOptions(executor="slurm", slurm={"acount": "x"}), "unknown key.*'acount'"),
        (ClusterOptions(executor="slurm", slurm={"partition": "x"}), "set by the flags"),
    ],
)
def test_bad_settings_are_refused_by_name(options, message):
    pytest.importorskip("submitit")
    with pytest.raises(ValueError, match=message):
        options.check()


def test_bad_input_fails_on_the_command_line_before_anything_is_submitted(
    tmp_path, tiny_corpus, capsys
):
    pytest.importorskip("submitit")
    path = suite_file(tmp_path, tiny_corpus)
    path.write_text(path.read_text() + '\n[slurm]\nacount = "lab"\n')
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--executor", "slurm"]) == 2
    assert "unknown key(s) 'acount'" in capsys.readouterr().err
    assert main(["sweep", str(path), "--out", str(out), "--slurm-partition", "gpu"]) == 2
    assert "only apply to --executor slurm" in capsys.readouterr().err
    assert not out.exists()


def test_without_submitit_a_submitit_executor_says_how_to_install_it(
    tmp_path, tiny_corpus, monkeypatch, capsys
):
    real_import = builtins.__import__

    def no_submitit(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name == "submitit" or name.startswith("submitit."):
            raise ImportError("no submitit")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_submitit)
    path = suite_file(tmp_path, tiny_corpus, regimes=("full",), steps=2)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--executor", "slurm"]) == 2
    assert "pip install 'aah-attention[cluster]'" in capsys.readouterr().err
    assert not out.exists()
    # The local executor needs no submitit at all.
    assert main(["sweep", str(path), "--out", str(out), "--no-progress"]) == 0
    assert len(read_csv(out / "tiny.csv")) == 1


def test_status_lists_each_cell_its_state_and_its_job(tmp_path, tiny_corpus, capsys):
    pytest.importorskip("submitit")
    path = suite_file(tmp_path, tiny_corpus, regimes=("full", "budget"), steps=2)
    out = tmp_path / "out"
    args = ["sweep", str(path), "--out", str(out), "--no-progress", "--regimes", "full"]
    assert main([*args, "--executor", "submitit-local"]) == 0
    capsys.readouterr()
    assert main(["sweep", str(path), "--out", str(out), "--status"]) == 0
    lines = [x.split() for x in capsys.readouterr().out.splitlines()[1:]]
    assert lines[0][0] == "done" and lines[0][1].endswith("full-s0")
    assert (
        lines[0][2] == "job"
        and int(lines[0][3]) > 0
        and lines[0][4:] == ["(submitit-local:", "ENDED)"]
    )
    assert lines[1][0] == "todo" and lines[1][1].endswith("budget-s0") and len(lines[1]) == 2
    assert os.path.isdir(out / "tiny" / ".submitit")


def test_the_slurm_settings_reach_the_sbatch_script(tmp_path, monkeypatch):
    """What submitit would hand to sbatch, rendered without a cluster (a stand-in `srun` on
    PATH is all its Slurm executor looks for)."""
    pytest.importorskip("submitit")
    options = ClusterOptions(executor="slurm", partition="gpu", time_min=30, gpus_per_cell=2,
                             cpus_per_cell=4, slurm={"account": "lab", "mem": "32G"})  # fmt: skip
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ValueError, match="no Slurm on this machine"):
        options.check()
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    with pytest.raises(ValueError, match="needs --slurm-time"):
        ClusterOptions(executor="slurm").check()
    script = (
        options.check()
        .executor_for(tmp_path / "jobs")
        ._executor._make_submission_file_text("python -m submitit.core._submit", "uid")
    )
    for line in ("--partition=gpu", "--time=30", "--gpus-per-node=2", "--cpus-per-task=4",
                 "--account=lab", "--mem=32G", "--nodes=1", "--ntasks-per-node=1"):  # fmt: skip
        assert f"#SBATCH {line}\n" in script, line


def test_a_timed_out_job_checkpoints_and_its_requeued_job_resumes(tmp_path, tiny_corpus):
    """submitit calls `CellJob.checkpoint` when a job times out or is preempted: the trainer
    checkpoints and stops, and the job it returns (requeued by submitit) resumes the cell to
    the uninterrupted result."""
    pytest.importorskip("submitit")
    sweep = SweepConfig.from_toml(suite_file(tmp_path, tiny_corpus, regimes=("budget",), steps=40))
    cell, run_dir = sweep.cells()[0], tmp_path / "cut"
    job = CellJob(cell, run_dir)
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(job()))
    worker.start()
    deadline = time.time() + 120
    while time.time() < deadline and not (run_dir / records.CHECKPOINT).exists():
        time.sleep(0.1)
    requeued = job.checkpoint()
    worker.join(timeout=120)
    assert codes == [130] and not (run_dir / records.SUMMARY).exists()
    assert requeued.function is not job and requeued.function.run_dir == run_dir
    assert requeued.function() == 0
    assert "--resume" in (run_dir / "train.log").read_text()
    whole = tmp_path / "whole"
    assert CellJob(cell, whole)() == 0
    cut_summary, whole_summary = (records.read_json(d / records.SUMMARY) for d in (run_dir, whole))
    for key in ("val_loss", "val_bpb", "acr", "causal_coverage", "tokens", "steps"):
        assert cut_summary[key] == whole_summary[key], key


def test_a_rerun_waits_for_a_job_still_running_instead_of_submitting_it_twice(
    tmp_path, tiny_corpus, capsys
):
    """A job an earlier sweep submitted (here a stand-in process under the cell's job record)
    is waited for; once it ends without finishing the cell, the cell is submitted and runs."""
    import subprocess
    import sys

    pytest.importorskip("submitit")
    sweep = SweepConfig.from_toml(suite_file(tmp_path, tiny_corpus, regimes=("full",), steps=2))
    out = tmp_path / "out"
    # Not this process's child (an earlier driver's job is not): it is reaped when it ends.
    code = "import time; time.sleep(4)  # a stand-in for a submitit job"
    line = f"{sys.executable} -c '{code}' >/dev/null 2>&1 & echo $!"
    started = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True)
    pid = int(started.stdout.strip())
    records_dir = out / "tiny" / ".jobs"
    records_dir.mkdir(parents=True)
    (records_dir / "full-s0.json").write_text(
        json.dumps({"job_id": str(pid), "executor": "submitit-local"})
    )
    outcome = run_sweep(sweep, out, progress=False, cluster=LOCAL_JOBS)
    log = capsys.readouterr().out
    assert f"full-s0 still running as job {pid}: waiting for it" in log
    assert "ended before the cell finished: submitting it again" in log
    assert outcome.finished == 1 and len(read_csv(out / "tiny.csv")) == 1
    # A record whose id now belongs to a process that is no submitit job is not waited for.
    (records_dir / "full-s0.json").write_text(
        json.dumps({"job_id": str(os.getpid()), "executor": "submitit-local"})
    )
    record = json.loads((records_dir / "full-s0.json").read_text())
    assert job_state(out / "tiny", record) == "ENDED"
