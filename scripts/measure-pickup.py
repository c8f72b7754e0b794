#!/usr/bin/env python3
"""Measures the time from `POST /api/jobs` to the job's first output line on an idle server.

Starts a release `tether-server` on a fresh SQLite data dir, pairs a real `tether-agent`,
and assigns jobs one at a time, each after the agent has gone idle. Prints every sample and
the percentiles. Usage: scripts/measure-pickup.py [JOBS]  (build with
`cargo build --release -p tether-server -p tether-agent` first).
"""
import json, os, urllib.error, random, re, statistics, subprocess, sys, tempfile, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release")
PORT = 18000 + random.randint(0, 999)
BASE = f"http://127.0.0.1:{PORT}"


def call(method, path, body=None, token=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(BASE + path, data=data, method=method)
    request.add_header("content-type", "application/json")
    if token:
        request.add_header("authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request) as answer:
            text = answer.read()
            return json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        raise SystemExit(f"{method} {path}: {error.code} {error.read().decode()}")


def main():
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    work = tempfile.mkdtemp()
    env = dict(os.environ, TETHER_DATA_DIR=os.path.join(work, "server"), RUST_LOG="warn")
    server = subprocess.Popen([f"{BIN}/tether-server", "--listen", f"127.0.0.1:{PORT}"], env=env)
    agent_env = dict(os.environ, TETHER_AGENT_HOME=os.path.join(work, "agent"), RUST_LOG="warn")
    agent = None
    try:
        for _ in range(100):
            try:
                call("GET", "/healthz")
                break
            except OSError:
                time.sleep(0.1)
        call("POST", "/api/auth/signup", {"email": "m@example.com", "password": "measure pickup latency", "name": "M"})
        login = urllib.request.Request(BASE + "/api/auth/login", method="POST",
                                       data=json.dumps({"email": "m@example.com", "password": "measure pickup latency"}).encode(),
                                       headers={"content-type": "application/json"})
        with urllib.request.urlopen(login) as answer:
            cookie = answer.headers["set-cookie"].split(";")[0]
            csrf = answer.headers["x-tether-csrf"]
        request = urllib.request.Request(BASE + "/api/tokens", method="POST", data=b'{"name":"measure"}',
                                         headers={"content-type": "application/json", "cookie": cookie,
                                                  "x-tether-csrf": csrf})
        with urllib.request.urlopen(request) as answer:
            token = json.loads(answer.read())["token"]
        pair = subprocess.Popen([f"{BIN}/tether-agent", "pair", BASE, "--name", "measure"], env=agent_env,
                                stdout=subprocess.PIPE, text=True)
        code = None
        for line in pair.stdout:
            if re.fullmatch(r"[A-Z]{4}-[A-Z]{4}", line.strip()):
                code = line.strip()
                break
        device = call("POST", "/api/devices/link", {"userCode": code}, token)["deviceId"]
        pair.wait(timeout=30)
        subprocess.run([f"{BIN}/tether-agent", "folders", "share", "work", work], env=agent_env, check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([f"{BIN}/tether-agent", "recipe", "add", "hello", "--", "echo", "hello"], env=agent_env,
                       check=True, stdout=subprocess.DEVNULL)
        agent = subprocess.Popen([f"{BIN}/tether-agent", "run"], env=agent_env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        while not any(d["id"] == device and d["online"] for d in call("GET", "/api/devices", token=token)):
            time.sleep(0.2)
        samples = []
        for n in range(jobs):
            time.sleep(random.uniform(0.5, 3.0))
            started = time.monotonic()
            job = call("POST", "/api/jobs", {"deviceId": device, "title": f"job {n}", "prompt": "go", "folder": "work",
                                             "engine": "hello", "mode": "unattended", "network": False,
                                             "timeoutMinutes": 5}, token)
            while True:
                events = call("GET", f"/api/jobs/{job['id']}", token=token)["events"]
                if any(event["kind"] == "output" for event in events):
                    break
                time.sleep(0.02)
            samples.append(time.monotonic() - started)
            print(f"job {n}: first output after {samples[-1]:.2f} s", flush=True)
            while call("GET", f"/api/jobs/{job['id']}", token=token)["state"] not in ("succeeded", "failed"):
                time.sleep(0.05)
        samples.sort()
        pct = lambda p: samples[min(len(samples) - 1, int(p * len(samples)))]
        print(f"jobs={len(samples)} mean={statistics.mean(samples):.2f}s p50={pct(0.5):.2f}s "
              f"p95={pct(0.95):.2f}s max={samples[-1]:.2f}s")
    finally:
        if agent:
            agent.terminate()
        server.terminate()


if __name__ == "__main__":
    main()
