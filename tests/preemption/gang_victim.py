"""A preemptible job for crash_hostile_test.py, one process per task:
python3 gang_victim.py MARKER_DIR ignore|mixed.

Every task of every attempt appends one line to MARKER_DIR/runs (O_APPEND lines are
atomic), "start ATTEMPT TASK PID TIME CHILD ESCAPEE", so the test counts the runs and
watches every process. Attempt 1 also starts two helpers that ignore SIGTERM, as a
hostile job would: CHILD, in the task's process group, and ESCAPEE, which leaves it
(setsid) so that a signal to the group misses it; neither may outlive the attempt. On its
SIGTERM a task appends "term ATTEMPT TASK TIME DEADLINE" (the contents of its deadline
file), then ignores the signal ("ignore": only the pool's SIGKILL at the deadline ends
it), or task 0 exits 0 and the others ignore it ("mixed": a gang one of whose tasks
checkpoints at once). Later attempts append
"end ATTEMPT TASK TIME" and succeed."""
import os
import signal
import subprocess
import sys
import time

out, mode = sys.argv[1:3]
attempt = os.environ.get("GPUPOOL_ATTEMPT", "?")
task = os.environ.get("GPUPOOL_TASK_INDEX", "0")
IGNORE_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"


def append(line):
    fd = os.open(os.path.join(out, "runs"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    os.write(fd, (line + "\n").encode())
    os.close(fd)


child = escapee = 0
if attempt == "1":
    child = subprocess.Popen([sys.executable, "-c", IGNORE_TERM]).pid
    escapee = subprocess.Popen([sys.executable, "-c", IGNORE_TERM], start_new_session=True).pid
append("start %s %s %d %.3f %d %d" % (attempt, task, os.getpid(), time.time(), child, escapee))
if attempt != "1":
    append("end %s %s %.3f" % (attempt, task, time.time()))
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
    append("term %s %s %.3f %s" % (attempt, task, termed[0], deadline or "-"))
    if mode == "mixed" and task == "0":
        sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
while True:
    time.sleep(0.05)
