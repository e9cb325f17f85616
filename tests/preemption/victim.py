"""A preemptible job for preemption_test.py: python3 victim.py MARKER_DIR
exit|checkpoint|wait GPUPOOL SERVER.

Attempt 1 runs until SIGTERM; on it, it records its deadline file's path and contents
(MARKER_DIR/term), then either exits ("exit": a job that checkpoints fast), says
`gpupool checkpoint-done` and ignores the signal ("checkpoint": the pool must kill it),
or exits once MARKER_DIR/go exists ("wait": a checkpoint the test ends).
Later attempts record that they ran (MARKER_DIR/attemptN) and succeed."""
import os
import signal
import subprocess
import sys
import time

out, mode, gpupool, server = sys.argv[1:5]
attempt = os.environ.get("GPUPOOL_ATTEMPT", "?")


def write(name, text):
    with open(os.path.join(out, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(out, name + ".tmp"), os.path.join(out, name))


if attempt != "1":
    write("attempt" + attempt, "ran\n")
    sys.exit(0)
path = os.environ.get("GPUPOOL_PREEMPT_DEADLINE_FILE", "")


def on_term(sig, frame):
    deadline = ""
    if path:
        with open(path) as f:
            deadline = f.read().strip()
    if mode == "wait" and os.path.exists(os.path.join(out, "term")):
        return  # the stop order sent again (a restarted pool): already waiting
    write("term", "%s %s %.3f\n" % (path, deadline, time.time()))
    while mode == "wait" and not os.path.exists(os.path.join(out, "go")):
        time.sleep(0.05)
    if mode == "checkpoint":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        r = subprocess.run([gpupool, "checkpoint-done"], capture_output=True, text=True,
                           env=dict(os.environ, GPUPOOL_SERVER=server))
        write("checkpoint", "%d %s %s" % (r.returncode, r.stdout, r.stderr))  # if still alive
        while True:
            time.sleep(1)
    write("exited", "%.3f\n" % time.time())
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
write("started", path + "\n")
while True:
    time.sleep(0.2)
