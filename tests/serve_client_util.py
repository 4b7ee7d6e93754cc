"""What the Python client tests of `tessera serve` share (tests/serve_*_client.py): failures collected as
they are found, the server started on a free port of 127.0.0.1 and stopped with SIGTERM (killed if it does
not stop), a 400 checked for the field it names, and the exit status. Standard library only."""
import re
import subprocess
import time

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)


def start(tessera, args, env=None):
    """`tessera serve --port 0 --served-model-name smollm2 ARGS`, once it says it is ready (at most 60 s):
    (process, port, the ready line)."""
    proc = subprocess.Popen([tessera, "serve", "--port", "0", "--served-model-name", "smollm2", *args],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    port, ready_line = None, ""
    deadline = time.time() + 60
    lines = []
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "ready:" in line:
            ready_line = line
            break
    if port is None or not ready_line:
        proc.kill()
        raise SystemExit("the server did not start: " + "".join(lines))
    return proc, port, ready_line


def stop(proc):
    """SIGTERM, then the exit code (-9: it had to be killed after 30 s)."""
    proc.send_signal(15)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return -9


def refused(openai, fn, param, words):
    """None when fn() is a 400 naming `param` with every one of `words` in its message; else what happened."""
    try:
        fn()
        return f"accepted (expected a 400 naming {param})"
    except openai.BadRequestError as e:
        body = e.body or {}
        msg = body.get("message", "")
        if body.get("param") != param or not all(w in msg for w in words):
            return f"400 but param={body.get('param')!r} message={msg!r}"
        return None


def exit_status(ok="OK"):
    """The exit status: 1 with the failure count, else 0 with `ok`."""
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        return 1
    print(ok)
    return 0
