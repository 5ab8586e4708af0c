"""Two gloo processes through torchrun with the same CLI: one run directory, world_size 2."""

import json
import os
import signal
import subprocess
import sys


def test_torchrun_two_processes(tmp_path, tiny_corpus):
    run = tmp_path / "ddp"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "aah",
        "train",
        "--out",
        str(run),
        "--no-progress",
        "--data.path",
        tiny_corpus,
        "--model.n_layer",
        "2",
        "--model.n_head",
        "4",
        "--model.n_kv_head",
        "1",
        "--model.d_model",
        "32",
        "--model.max_seq_len",
        "32",
        "--train.batch_size",
        "4",
        "--train.max_steps",
        "12",
        "--train.eval_interval",
        "6",
        "--train.log_interval",
        "3",
        "--train.threads",
        "1",
        "--controller.policy",
        "random",
        "--controller.random_resample",
        "true",
        "--controller.warmup_steps",
        "2",
        "--controller.interval",
        "3",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers: one session
        proc.communicate()
        raise
    assert proc.returncode == 0, stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 12
    assert summary["tokens"] == 12 * 2 * 4 * 32  # both ranks' tokens are counted
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [3, 6, 9, 12]  # rank 0 alone writes: no duplicate lines
    plans = [json.loads(x) for x in (run / "plans.jsonl").read_text().splitlines()]
    assert [p["step"] for p in plans] == [0, 2, 5, 8, 11]
    assert stdout.count("window map") == 1
