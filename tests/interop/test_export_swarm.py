"""`gantry export swarm` deployed on Docker Swarm for real: a SentenceEncoder
Deployment with three replicas (the model folder of GANTRY_MODEL_PATH mounted
through the YAML's `volumes:`; NoOpExec without it) exported to a stack file,
run with `docker stack deploy` on a one-node swarm of the local dockerd from
the image gantry:cpu, and posted to through the published gateway port with
the stock Jina client and the Gantry C++ client. The gateway must hold a
connection to each of the three replicas' containers (the service is
`endpoint_mode: dnsrr`, so its name resolves to every task). Then one
replica's container is killed while the C++ client keeps posting: Swarm
starts a new task, the gateway connects to it once its connections age out
(the export's --max-connection-age), and no request may fail. A Flow of two
steps is deployed the same way and posted through, its gateway connected to
both tasks of the replicated step.

Run by ctest (label `docker`, tests/interop/run_compose_tests.sh), which
skips with the reason when no Docker daemon answers or the image is
missing. A swarm this test initialised is left again, and the stack is
removed (and its containers waited for) in a finally block, also when a
step fails.
"""
import contextlib
import os
import subprocess
import tempfile
import threading
import time
import unittest
import uuid

from docarray import DocList
from docarray.documents.legacy import LegacyDocument
from jina import Client

from gantry_process import free_port
# Importing it also makes SIGTERM, SIGHUP and SIGPIPE end the test through
# its finally blocks.
from test_export_compose import connected_ips, run, wait_until

IMAGE = os.environ.get("GANTRY_IMAGE", "gantry:cpu")
MODEL_PATH = os.environ.get("GANTRY_MODEL_PATH", "")
REPLICAS = 3
REPLICA_PORT = 8081
# Documents each post of the C++ client sends, two per request: enough that
# a request is in flight most of the time.
DOCS_PER_POST = 32

ENCODER = """\
jtype: Deployment
with:
  name: encoder
  uses: SentenceEncoder
  uses_with: {{model_path: /models, device: cpu}}
  replicas: {replicas}
  port: {port}
  volumes: ["{model}:/models:ro"]
"""

NO_OP = """\
jtype: Deployment
with:
  name: encoder
  uses: NoOpExec
  replicas: {replicas}
  port: {port}
"""


FLOW = """\
jtype: Flow
with: {{name: pipeline, port: {port}}}
executors:
  - {{name: first_step, uses: NoOpExec}}
  - {{name: second, uses: NoOpExec, replicas: 2}}
"""


def swarm_state():
    return run(["docker", "info", "-f", "{{.Swarm.LocalNodeState}}"], None, 60).stdout.strip()


@contextlib.contextmanager
def swarm_stack(yaml_text, tmp):
    """Exports `yaml_text` with `gantry export swarm` and deploys it under a
    stack name of its own; yields the name. The services' logs are printed
    when the body fails; the stack is removed in any case and its
    containers and network waited for."""
    source = os.path.join(tmp, "source.yml")
    with open(source, "w") as f:
        f.write(yaml_text)
    stack_file = os.path.join(tmp, "stack.yml")
    run([os.environ["GANTRY_CLI"], "export", "swarm", source, stack_file, "--image", IMAGE],
        tmp, 60)
    stack = "gantrystack" + uuid.uuid4().hex[:8]
    try:
        # The image is local: no registry to resolve its digest on.
        run(["docker", "stack", "deploy", "--resolve-image", "never", "-c", stack_file, stack],
            tmp, 180)
        yield stack
    except BaseException:
        services = run(["docker", "stack", "services", "--format", "{{.Name}}", stack], tmp, 60,
                       check=False).stdout.split()
        for service in services:
            run(["docker", "service", "logs", "--no-task-ids", "--tail", "40", service], tmp, 60,
                check=False)
        run(["docker", "stack", "ps", "--no-trunc", stack], tmp, 60, check=False)
        raise
    finally:
        run(["docker", "stack", "rm", stack], tmp, 120, check=False)
        label = f"label=com.docker.stack.namespace={stack}"
        wait_until("the stack's containers gone",
                   lambda: not run(["docker", "ps", "-aq", "--filter", label], tmp, 30,
                                   check=False).stdout.split(), 120)
        # `stack rm` removes the network once its last container has gone.
        wait_until("the stack's network gone",
                   lambda: not run(["docker", "network", "ls", "-q", "--filter",
                                    f"name={stack}_default"], tmp, 30,
                                   check=False).stdout.split(), 60)


def post_with_jina(port, endpoint, count, embeddings):
    """Posts `count` documents with the stock Jina client, two per request,
    and checks they all come back (with 384-d embeddings if asked)."""
    client = Client(host="127.0.0.1", port=port, protocol="grpc")
    docs = DocList[LegacyDocument]([LegacyDocument(text=f"swarm {i}") for i in range(count)])
    out = client.post(endpoint, docs, return_type=DocList[LegacyDocument], request_size=2)
    assert sorted(d.text for d in out) == sorted(f"swarm {i}" for i in range(count)), \
        [d.text for d in out]
    if embeddings:
        assert all(d.embedding is not None and len(d.embedding) == 384 for d in out), \
            "Jina client: no 384-d embeddings"


def answers_a_post(port, endpoint):
    """Swarm has no start order: the gateway may come up before the tasks
    are in DNS, and answers UNAVAILABLE until then."""
    try:
        post_with_jina(port, endpoint, 2, embeddings=False)
        return True
    except ConnectionError as error:
        print(f"not yet: {error}", flush=True)
        return False


class SwarmStack(unittest.TestCase):
    def setUp(self):
        self.initialised_swarm = False
        if swarm_state() != "active":
            run(["docker", "swarm", "init", "--advertise-addr", "127.0.0.1"], None, 120)
            self.initialised_swarm = True

    def tearDown(self):
        if self.initialised_swarm:
            run(["docker", "swarm", "leave", "--force"], None, 120, check=False)

    def service_containers(self, stack, service):
        """Running containers of the stack's service, by id."""
        return run(["docker", "ps", "-q", "--filter",
                    f"label=com.docker.swarm.service.name={stack}_{service}"],
                   None, 60).stdout.split()

    def container_ip(self, container, network):
        return run(["docker", "inspect", "-f",
                    "{{(index .NetworkSettings.Networks \"" + network + "\").IPAddress}}",
                    container], None, 30).stdout.strip()

    def test_deployment_with_three_replicas_survives_a_killed_container(self):
        template = ENCODER if MODEL_PATH else NO_OP
        endpoint = "/encode" if MODEL_PATH else "/"
        port = free_port()
        yaml_text = template.format(replicas=REPLICAS, port=port,
                                    model=os.path.abspath(MODEL_PATH or "."))
        with tempfile.TemporaryDirectory() as tmp, swarm_stack(yaml_text, tmp) as stack:
            network = f"{stack}_default"
            wait_until(f"{REPLICAS} encoder containers running",
                       lambda: len(self.service_containers(stack, "encoder")) == REPLICAS, 240)
            address = f"127.0.0.1:{port}"
            wait_until(f"gateway {address} ready (Swarm's published port)",
                       lambda: run([os.environ["GANTRY_CLI"], "ping", address], tmp, 30,
                                   check=False).returncode == 0, 180)
            wait_until("the gateway answers a post", lambda: answers_a_post(port, endpoint), 120)

            # Every request may go to another replica: after enough posts
            # the gateway holds a connection to each of them.
            gateway = self.service_containers(stack, "gateway")[0]
            replicas = self.service_containers(stack, "encoder")
            replica_ips = {self.container_ip(c, network) for c in replicas}
            self.assertEqual(len(replica_ips), REPLICAS, replica_ips)

            def reaches_every_replica():
                post_with_jina(port, endpoint, 12, embeddings=bool(MODEL_PATH))
                return connected_ips(gateway, REPLICA_PORT) == replica_ips

            wait_until("the gateway connected to every replica's container",
                       reaches_every_replica, 60)
            print(f"stack {stack}: gateway on {address} connected to {sorted(replica_ips)}",
                  flush=True)

            # A stream of posts while one replica's container is killed.
            failures = []
            posted = [0]
            stop = threading.Event()

            def keep_posting():
                while not stop.is_set():
                    # Not through run(): each post prints a line per document.
                    done = subprocess.run([os.environ["GANTRY_INTEROP_CLIENT"], address,
                                           endpoint, str(DOCS_PER_POST)],
                                          capture_output=True, text=True, timeout=120)
                    if done.returncode != 0:
                        failures.append(done.stdout + done.stderr)
                    posted[0] += 1

            poster = threading.Thread(target=keep_posting)
            poster.start()
            try:
                time.sleep(2)
                victim = replicas[0]
                killed_at = time.monotonic()
                run(["docker", "kill", victim], tmp, 60)
                wait_until("Swarm replaced the killed container",
                           lambda: (len(set(self.service_containers(stack, "encoder")) -
                                        {victim}) == REPLICAS), 180)
                replaced_in = time.monotonic() - killed_at
                # The executors ask the gateway to reconnect every 30 s
                # (--max-connection-age in the export): it resolves the name
                # again and connects to the new task, while the posts go on.
                now_ips = {self.container_ip(c, network)
                           for c in self.service_containers(stack, "encoder")}
                wait_until("the gateway connected to the new replica too",
                           lambda: connected_ips(gateway, REPLICA_PORT) == now_ips, 150)
                rejoined_in = time.monotonic() - killed_at
            finally:
                stop.set()
                poster.join(timeout=180)
            self.assertEqual(failures, [], f"{len(failures)} of {posted[0]} posts failed")
            self.assertGreater(posted[0], 5)
            post_with_jina(port, endpoint, 10, embeddings=bool(MODEL_PATH))
            gateway_log = run(["docker", "service", "logs", "--no-task-ids",
                               f"{stack}_gateway"], tmp, 60).stdout
            retried = gateway_log.count("retrying on another replica")
            print(f"killed replica container {victim[:12]}: Swarm started another within "
                  f"{replaced_in:.1f} s, the gateway connected to it within "
                  f"{rejoined_in:.1f} s; {posted[0]} posts of {DOCS_PER_POST} documents "
                  f"meanwhile, none failed ({retried} requests retried by the gateway)",
                  flush=True)

    def test_flow_of_two_steps(self):
        """A Flow's gateway (`gantry flow` with its Flow as a Swarm config)
        posts through both steps; the second step's two tasks both serve."""
        port = free_port()
        with tempfile.TemporaryDirectory() as tmp, \
                swarm_stack(FLOW.format(port=port), tmp) as stack:
            wait_until("2 containers of the second step running",
                       lambda: len(self.service_containers(stack, "second")) == 2, 240)
            wait_until("the Flow's gateway answers a post", lambda: answers_a_post(port, "/"),
                       180)
            gateway = self.service_containers(stack, "gateway")[0]
            second = {self.container_ip(c, f"{stack}_default")
                      for c in self.service_containers(stack, "second")}

            def reaches_both():
                post_with_jina(port, "/", 12, embeddings=False)
                return connected_ips(gateway, 8082) == second

            wait_until("the Flow's gateway connected to both tasks of the second step",
                       reaches_both, 60)
            print(f"stack {stack}: Flow of two steps, the gateway connected to the second "
                  f"step's tasks {sorted(second)}", flush=True)


if __name__ == "__main__":
    unittest.main()
