"""A preemptible job for crash_test.py: python3 crash_victim.py MARKER_DIR ignore|finish.

Every attempt appends "start ATTEMPT PID TIME CHILD" to MARKER_DIR/runs (O_APPEND lines are
atomic), so the test counts the runs and watches the process. Attempt 1 runs until its
SIGTERM, records its deadline file's contents and the time (MARKER_DIR/term), then
either ignores the signal ("ignore": only the pool's SIGKILL at the deadline ends it, and
a child, CHILD's pid, that ignores it too) or
finishes its work two seconds later and exits 0 ("finish": a job whose work ended during
its grace), recording that (MARKER_DIR/finished). Later attempts append "end ATTEMPT" and
succeed."""
import os
import signal
import subprocess
import sys
import time

out, mode = sys.argv[1:3]
attempt = os.environ.get("GPUPOOL_ATTEMPT", "?")


def append(line):
    fd = os.open(os.path.join(out, "runs"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    os.write(fd, (line + "\n").encode())
    os.close(fd)


def write(name, text):
    with open(os.path.join(out, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(out, name + ".tmp"), os.path.join(out, name))


child = 0
if attempt == "1" and mode == "ignore":
    # A child in its process group that ignores SIGTERM too: the SIGKILL must reach it.
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal("
                              "signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"]).pid
append("start %s %d %.3f %d" % (attempt, os.getpid(), time.time(), child))
if attempt != "1":
    append("end " + attempt)
    sys.exit(0)
termed = []


def on_term(sig, frame):
    if termed:
        return  # the stop order sent again (a restarted controller or agent)
    termed.append(time.time())
    deadline = ""
    path = os.environ.get("GPUPOOL_PREEMPT_DEADLINE_FILE", "")
    if path:
        with open(path) as f:
            deadline = f.read().strip()
    write("term", "%s %.3f\n" % (deadline, termed[0]))


signal.signal(signal.SIGTERM, on_term)
while True:
    time.sleep(0.05)
    if mode == "finish" and termed and time.time() >= termed[0] + 2:
        write("finished", "%.3f\n" % time.time())
        sys.exit(0)
