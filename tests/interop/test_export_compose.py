"""`gantry export docker-compose` brought up for real: a Deployment YAML
(NoOpExec, two replicas), a Flow of two steps and, with GANTRY_MODEL_PATH, a
SentenceEncoder Deployment with the model mounted, exported to compose files,
started with Debian's docker-compose 1.29 on the local dockerd from the image
gantry:cpu, posted to through the published gateway port with the Gantry C++
client (gantry_interop_client) and the stock Jina client, then taken down.
The Deployment's gateway must hold connections to both replicas (Docker's DNS
gives the service name both addresses; round_robin uses them).

Run by ctest (label `docker`, tests/interop/run_compose_tests.sh), which
skips with the reason when no Docker daemon answers, the image or
docker-compose is missing. The compose project has a name of its own and
`docker-compose down -v` runs in a finally block, also when a step fails.
"""
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

from docarray import DocList
from docarray.documents.legacy import LegacyDocument
from jina import Client

from gantry_process import free_port

IMAGE = os.environ.get("GANTRY_IMAGE", "gantry:cpu")
# An extra compose file layered over the exported one (`-f`), for what the
# export does not write: volumes with model weights, another registry.
OVERRIDE = os.environ.get("GANTRY_COMPOSE_OVERRIDE", "")
# The all-MiniLM-L6-v2 folder (scripts/fetch_model.sh) for the SentenceEncoder
# round trip; mounted read-only at /models. Unset: that test skips.
MODEL_PATH = os.environ.get("GANTRY_MODEL_PATH", "")
REPLICAS = 2

DEPLOYMENT = """\
jtype: Deployment
with:
  name: encoder
  uses: NoOpExec
  replicas: {replicas}
  port: {port}
"""


def run(args, cwd, timeout, check=True, env=None):
    print("$ " + " ".join(args), flush=True)
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)
    output = (done.stdout + done.stderr).strip()
    if output:
        print(output, flush=True)
    if check and done.returncode != 0:
        raise AssertionError(f"{args[0]} exited with {done.returncode}")
    return done


ENCODER = """\
jtype: Deployment
with:
  name: encoder
  uses: SentenceEncoder
  uses_with: {{model_path: /models, device: cpu}}
  replicas: {replicas}
  port: {port}
"""

# What the export leaves to the user: the model's volume.
ENCODER_VOLUME = """\
version: "2.4"
services:
  encoder:
    volumes: ["{model}:/models:ro"]
"""

FLOW = """\
jtype: Flow
with: {{name: pipeline, port: {port}}}
executors:
  - {{name: first_step, uses: NoOpExec}}
  - {{name: second, uses: NoOpExec, replicas: {replicas}}}
"""


def wait_until(what, condition, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout} s")


def connected_ips(container, port):
    """The remote addresses of `container`'s established TCP connections
    (/proc/net/tcp, state 01) to `port`."""
    tcp = run(["docker", "exec", container, "cat", "/proc/net/tcp"], None, 30).stdout
    connected = set()
    for row in tcp.splitlines()[1:]:
        fields = row.split()
        ip_hex, port_hex = fields[2].split(":")
        if fields[3] == "01" and int(port_hex, 16) == port:
            connected.add(".".join(str(b) for b in reversed(bytes.fromhex(ip_hex))))
    return connected


@contextlib.contextmanager
def compose_project(compose_files, tmp):
    """`docker-compose up -d` of the files under a project name of its own;
    yields the docker-compose command prefix. Its logs are printed when the
    body fails, and `down -v` runs in any case, after which no container of
    the project may be left."""
    project = "gantryexport" + uuid.uuid4().hex[:10]
    base = ["docker-compose", "-p", project]
    for path in compose_files:
        base += ["-f", path]
    try:
        run(base + ["up", "-d"], tmp, 300)
        yield base
    except BaseException:
        run(base + ["logs", "--no-color", "--tail", "50"], tmp, 60, check=False)
        raise
    finally:
        run(base + ["down", "-v", "--remove-orphans", "--timeout", "20"], tmp, 180, check=False)
        left = run(["docker", "ps", "-aq", "--filter",
                    f"label=com.docker.compose.project={project}"], tmp, 30,
                   check=False).stdout.split()
        assert left == [], f"containers left behind: {left}"


class Interrupted(Exception):
    pass


def raise_interrupted(signum, _frame):
    raise Interrupted(f"signal {signum}")


# ctest's timeout, a closed output pipe and SIGTERM end the test through
# its `finally` (docker-compose down), not around it.
for _signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
    signal.signal(_signum, raise_interrupted)


class ComposeRoundTrip(unittest.TestCase):
    def round_trip(self, yaml_template, replicated_service, endpoint="/", extra_compose=""):
        """Exports, brings up, posts with both clients, checks that the
        gateway reaches every container of `replicated_service`, takes down.
        Returns the Gantry client's documents."""
        with tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            source = os.path.join(tmp, "source.yml")
            with open(source, "w") as f:
                f.write(yaml_template.format(replicas=REPLICAS, port=port))
            compose = os.path.join(tmp, "compose.yml")
            run([os.environ["GANTRY_CLI"], "export", "docker-compose", source, compose,
                 "--image", IMAGE], tmp, 60)
            files = [compose]
            if extra_compose:
                extra = os.path.join(tmp, "extra.yml")
                with open(extra, "w") as f:
                    f.write(extra_compose)
                files.append(extra)
            if OVERRIDE:
                files.append(OVERRIDE)
            with compose_project(files, tmp) as base:
                # deploy.replicas is honoured without --compatibility (1.27+).
                ids = run(base + ["ps", "-q", replicated_service], tmp, 60).stdout.split()
                self.assertEqual(len(ids), REPLICAS, ids)
                address = f"127.0.0.1:{port}"
                wait_until(f"gateway {address} healthy",
                           lambda: run([os.environ["GANTRY_CLI"], "ping", address], tmp, 30,
                                       check=False).returncode == 0, 120)

                cpp = run([os.environ["GANTRY_INTEROP_CLIENT"], address, endpoint, "10"], tmp, 120)
                lines = [json.loads(line) for line in cpp.stdout.splitlines()
                         if line.startswith("{")]
                self.assertEqual([line["text"] for line in lines],
                                 [f"doc{i}" for i in range(10)], cpp.stdout)

                client = Client(host="127.0.0.1", port=port, protocol="grpc")
                self.assertTrue(client.is_flow_ready())
                docs = DocList[LegacyDocument](
                    [LegacyDocument(text=f"jina {i}") for i in range(7)])
                out = client.post(endpoint, docs, return_type=DocList[LegacyDocument],
                                  request_size=2)
                # Streamed requests may come back in any order (Jina's default).
                self.assertEqual(sorted(d.text for d in out), [f"jina {i}" for i in range(7)])
                if endpoint == "/encode":
                    self.assertTrue(all(d.embedding is not None and len(d.embedding) == 384
                                        for d in out), "Jina client: no 384-d embeddings")

                # The gateway's established connections (/proc/net/tcp, state
                # 01) to the replicas' gRPC port reach every one of them.
                replica_ips = set()
                for cid in ids:
                    replica_ips.add(run(["docker", "inspect", "-f",
                                         "{{range .NetworkSettings.Networks}}{{.IPAddress}}"
                                         "{{end}}", cid], tmp, 30).stdout.strip())
                gateway_id = run(base + ["ps", "-q", "gateway"], tmp, 60).stdout.split()[0]
                replica_port = 8081 if replicated_service == "encoder" else 8082
                connected = connected_ips(gateway_id, replica_port)
                self.assertEqual(connected, replica_ips)
                print(f"compose round trip ({replicated_service} x{REPLICAS}, gateway on "
                      f"{address}): Gantry client got {len(lines)} docs, Jina client got "
                      f"{len(out)} docs; gateway connected to {sorted(connected)}", flush=True)
                return lines

    def test_deployment(self):
        self.round_trip(DEPLOYMENT, "encoder")

    def test_flow_of_two_steps(self):
        self.round_trip(FLOW, "second")

    def test_deployment_with_tls(self):
        """The Deployment's TLS files bind-mounted into the exported gateway:
        `gantry ping --tls` and the stock Jina client (grpcs, trusting the
        test's own CA through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH) reach it,
        and a plaintext client does not."""
        with tempfile.TemporaryDirectory() as tmp:
            cert = os.path.join(tmp, "cert.pem")
            key = os.path.join(tmp, "key.pem")
            run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                 "-subj", "/CN=gantry-export-test", "-addext", "subjectAltName=IP:127.0.0.1",
                 "-keyout", key, "-out", cert], tmp, 60)
            os.chmod(key, 0o644)  # the gateway in the container runs as another user
            port = free_port()
            source = os.path.join(tmp, "source.yml")
            with open(source, "w") as f:
                f.write(DEPLOYMENT.format(replicas=1, port=port) +
                        "  ssl_certfile: cert.pem\n  ssl_keyfile: key.pem\n")
            compose = os.path.join(tmp, "compose.yml")
            run([os.environ["GANTRY_CLI"], "export", "docker-compose", source, compose,
                 "--image", IMAGE], tmp, 60)
            with compose_project([compose], tmp) as base:
                address = f"127.0.0.1:{port}"
                ping = [os.environ["GANTRY_CLI"], "ping", address, "--ssl-cafile", cert]
                wait_until(f"gateway {address} answers over TLS",
                           lambda: run(ping, tmp, 30, check=False).returncode == 0, 120)
                plain = run([os.environ["GANTRY_CLI"], "ping", address, "--timeout", "2000"],
                            tmp, 30, check=False)
                self.assertNotEqual(plain.returncode, 0, "a plaintext ping got an answer")
                jina = run([sys.executable, "-c",
                            "from docarray import DocList\n"
                            "from docarray.documents.legacy import LegacyDocument\n"
                            "from jina import Client\n"
                            f"client = Client(host='grpcs://127.0.0.1:{port}')\n"
                            "docs = DocList[LegacyDocument]([LegacyDocument(text=f'tls {i}') "
                            "for i in range(5)])\n"
                            "out = client.post('/', docs, return_type=DocList[LegacyDocument])\n"
                            "print('TEXTS', sorted(d.text for d in out))\n"],
                           tmp, 120, check=False,
                           env={**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": cert})
                self.assertIn("TEXTS ['tls 0', 'tls 1', 'tls 2', 'tls 3', 'tls 4']",
                              jina.stdout, jina.stderr)
                print(f"compose round trip with TLS (gateway on {address}): gantry ping and "
                      f"the Jina client over TLS answered; plaintext refused", flush=True)

    @unittest.skipUnless(MODEL_PATH, "GANTRY_MODEL_PATH is not set (scripts/fetch_model.sh)")
    def test_sentence_encoder_with_the_model_mounted(self):
        lines = self.round_trip(ENCODER, "encoder", "/encode",
                                ENCODER_VOLUME.format(model=os.path.abspath(MODEL_PATH)))
        self.assertTrue(all(line.get("embedding_shape") == "[384]" for line in lines),
                        [line.get("embedding_shape") for line in lines])


if __name__ == "__main__":
    unittest.main()
