"""`gantry export docker-compose` brought up for real: a Deployment YAML
(NoOpExec, two replicas) exported to a compose file, started with Debian's
docker-compose 1.29 on the local dockerd from the image gantry:cpu, posted to
through the published gateway port with the Gantry C++ client
(gantry_interop_client) and the stock Jina client, then taken down.

Run by ctest (label `docker`, tests/interop/run_compose_tests.sh), which
skips with the reason when no Docker daemon answers, the image or
docker-compose is missing. The compose project has a name of its own and
`docker-compose down -v` runs in a finally block, also when a step fails.
"""
import json
import os
import subprocess
import tempfile
import time
import unittest
import uuid

from docarray import DocList
from docarray.documents.legacy import LegacyDocument
from jina import Client

from gantry_process import free_port

IMAGE = os.environ.get("GANTRY_IMAGE", "gantry:cpu")
REPLICAS = 2

DEPLOYMENT = """\
jtype: Deployment
with:
  name: encoder
  uses: NoOpExec
  replicas: {replicas}
  port: {port}
"""


def run(args, cwd, timeout, check=True):
    print("$ " + " ".join(args), flush=True)
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    output = (done.stdout + done.stderr).strip()
    if output:
        print(output, flush=True)
    if check and done.returncode != 0:
        raise AssertionError(f"{args[0]} exited with {done.returncode}")
    return done


def wait_until(what, condition, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout} s")


class ComposeRoundTrip(unittest.TestCase):
    def test_exported_deployment_serves_gantry_and_jina_clients(self):
        with tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            source = os.path.join(tmp, "deployment.yml")
            with open(source, "w") as f:
                f.write(DEPLOYMENT.format(replicas=REPLICAS, port=port))
            compose = os.path.join(tmp, "compose.yml")
            run([os.environ["GANTRY_CLI"], "export", "docker-compose", source, compose,
                 "--image", IMAGE], tmp, 60)
            project = "gantryexport" + uuid.uuid4().hex[:10]
            base = ["docker-compose", "-p", project, "-f", compose]
            try:
                run(base + ["up", "-d"], tmp, 300)
                # deploy.replicas is honoured without --compatibility (1.27+).
                ids = run(base + ["ps", "-q", "encoder"], tmp, 60).stdout.split()
                self.assertEqual(len(ids), REPLICAS, ids)
                address = f"127.0.0.1:{port}"
                wait_until(f"gateway {address} healthy",
                           lambda: run([os.environ["GANTRY_CLI"], "ping", address], tmp, 30,
                                       check=False).returncode == 0, 120)

                cpp = run([os.environ["GANTRY_INTEROP_CLIENT"], address, "/", "10"], tmp, 120)
                lines = [json.loads(line) for line in cpp.stdout.splitlines()
                         if line.startswith("{")]
                self.assertEqual(len(lines), 10, cpp.stdout)
                self.assertEqual([line["text"] for line in lines],
                                 [f"doc{i}" for i in range(10)])

                client = Client(host="127.0.0.1", port=port, protocol="grpc")
                self.assertTrue(client.is_flow_ready())
                docs = DocList[LegacyDocument](
                    [LegacyDocument(text=f"jina {i}") for i in range(7)])
                out = client.post("/", docs, return_type=DocList[LegacyDocument],
                                  request_size=2)
                self.assertEqual([d.text for d in out], [f"jina {i}" for i in range(7)])
                print(f"compose round trip: {REPLICAS} encoder replicas, gateway on {address}; "
                      f"Gantry client got {len(lines)} docs, Jina client got {len(out)} docs",
                      flush=True)
            except BaseException:
                run(base + ["logs", "--no-color", "--tail", "50"], tmp, 60, check=False)
                raise
            finally:
                run(base + ["down", "-v", "--remove-orphans", "--timeout", "20"], tmp, 180,
                    check=False)
                left = run(["docker", "ps", "-aq", "--filter",
                            f"label=com.docker.compose.project={project}"], tmp, 30,
                           check=False).stdout.split()
                self.assertEqual(left, [], "containers left behind")


if __name__ == "__main__":
    unittest.main()
