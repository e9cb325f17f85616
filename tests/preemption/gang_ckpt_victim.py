"""A task of a preemptible gang for preemption_test.py:
python3 gang_ckpt_victim.py MARKER_DIR GPUPOOL SERVER.

Attempt 1 runs until SIGTERM (MARKER_DIR/startedTASK once it runs). On it, task 1 has
saved its shard at once: it says `gpupool checkpoint-done` from inside the task (the
client sends its GPUPOOL_TASK_INDEX) and ignores the signal, so the pool must kill it.
Task 0 saves its own shard for longer: once task 1 has said it (MARKER_DIR/saying1), it
takes 3 s more, then writes MARKER_DIR/shard0 and exits. Its grace must outlast task 1's
word: a checkpoint-done that ended the whole job's grace killed it mid-save (red team 7,
finding 2). Later attempts write MARKER_DIR/attemptN.TASK and succeed."""
import os
import signal
import subprocess
import sys
import time

out, gpupool, server = sys.argv[1:4]
attempt = os.environ.get("GPUPOOL_ATTEMPT", "?")
task = os.environ.get("GPUPOOL_TASK_INDEX", "?")


def write(name, text):
    with open(os.path.join(out, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(out, name + ".tmp"), os.path.join(out, name))


if attempt != "1":
    write("attempt%s.%s" % (attempt, task), "ran\n")
    sys.exit(0)


def on_term(sig, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if task == "1":
        write("saying1", "%.3f\n" % time.time())
        subprocess.run([gpupool, "checkpoint-done"], env=dict(os.environ, GPUPOOL_SERVER=server))
        while True:  # killed by the pool, its grace over
            time.sleep(1)
    saying = os.path.join(out, "saying1")
    deadline = time.time() + 30
    while not os.path.exists(saying) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(3)  # the rest of its own shard's save
    write("shard0", "saved\n")
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
write("started" + task, "%.3f\n" % time.time())
while True:
    time.sleep(0.2)
