"""`gantry export kubernetes` checked by a Kubernetes schema validator:
kubernetes-validate (PyPI, in the venv of scripts/clients_venv.sh) in strict
mode (unknown fields are errors) against Kubernetes KUBERNETES_VERSION, for a
Deployment and for a Flow of three steps, one of them on GPUs.

Run by ctest (label `interop`, tests/interop/run_export_tests.sh).
"""
import glob
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import kubernetes_validate

# A version the validator bundles schemas for (its kubernetes-json-schema
# folder); docs/export.md names the same one.
KUBERNETES_VERSION = "1.30.0"
VALIDATOR = os.path.join(os.path.dirname(sys.executable), "kubernetes-validate")

DEPLOYMENT = """\
jtype: Deployment
with:
  name: encoder
  uses: {jtype: NoOpExec, with: {label: "007"}}
  replicas: 3
  http_port: 8090
  env: {GREETING: hello}
  monitoring: true
  models: {my-encoder: /encode}
  log_format: json
  access_log: true
"""

FLOW = """\
jtype: Flow
with: {name: search, port: 9000, monitoring: true}
executors:
  - {name: tokenizer, uses: NoOpExec, replicas: 2}
  - name: text_encoder
    uses: MyGPUExec
    gpus: 1
    uses_dynamic_batching: {/encode: {preferred_batch_size: 16, timeout: 5}}
  - {name: indexer, uses: NoOpExec, needs: [tokenizer, text_encoder]}
"""

# An executor of its own image with the model mounted from the host.
DOCKER_STEP = """\
jtype: Deployment
with:
  name: encoder
  uses: docker://team/encoder:1.2
  env: {GANTRY_EXECUTOR: SentenceEncoder}
  volumes: [/srv/models/all-MiniLM-L6-v2:/models/all-MiniLM-L6-v2:ro]
  replicas: 2
"""


def export(tmp, name, yaml_text):
    source = os.path.join(tmp, name + ".yml")
    with open(source, "w") as f:
        f.write(yaml_text)
    out = os.path.join(tmp, name)
    subprocess.run([os.environ["GANTRY_CLI"], "export", "kubernetes", source, out,
                    "--namespace", "gantry-test"], check=True, timeout=60)
    files = sorted(glob.glob(os.path.join(out, "*.yml")))
    assert files, f"nothing exported into {out}"
    return files


def validate(files):
    """Runs the validator's CLI; returns (exit code, output)."""
    run = subprocess.run([VALIDATOR, "--strict", "-k", KUBERNETES_VERSION] + files,
                         capture_output=True, text=True, timeout=120)
    return run.returncode, run.stdout + run.stderr


class ExportedManifestsValidate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        print(f"validator: kubernetes-validate {kubernetes_validate.__version__} "
              f"(--strict) against Kubernetes {KUBERNETES_VERSION}", flush=True)
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, files, kinds):
        code, output = validate(files)
        print(output, flush=True)
        self.assertEqual(code, 0, output)
        for kind in kinds:
            self.assertIn(f"passed for resource {kind}", output)
        self.assertNotIn("did not validate", output)

    def test_deployment(self):
        files = export(self.tmp.name, "deployment", DEPLOYMENT)
        self.check(files, ["configmap/encoder-config", "deployment/encoder", "service/encoder",
                           "deployment/gateway", "service/gateway"])

    def test_flow_with_a_gpu_step(self):
        files = export(self.tmp.name, "flow", FLOW)
        self.check(files, ["deployment/tokenizer", "deployment/text-encoder",
                           "configmap/text-encoder-config", "deployment/indexer",
                           "configmap/gateway-config", "deployment/gateway", "service/gateway"])

    def test_a_docker_step_with_a_host_path_volume(self):
        files = export(self.tmp.name, "docker_step", DOCKER_STEP)
        with open(os.path.join(self.tmp.name, "docker_step", "encoder.yml")) as f:
            text = f.read()
        self.assertIn("image: team/encoder:1.2", text)
        self.assertIn("hostPath:", text)
        self.check(files, ["configmap/encoder-config", "deployment/encoder", "service/encoder"])

    def test_a_deployment_with_tls_mounts_a_secret(self):
        for name in ("cert.pem", "key.pem", "ca.pem"):
            with open(os.path.join(self.tmp.name, name), "w") as f:
                f.write(f"{name} text\n")
        files = export(self.tmp.name, "tls", DEPLOYMENT + "  ssl_certfile: cert.pem\n"
                       "  ssl_keyfile: key.pem\n  ssl_client_cafile: ca.pem\n")
        with open(os.path.join(self.tmp.name, "tls", "gateway.yml")) as f:
            text = f.read()
        self.assertIn("secretName: gateway-tls", text)
        self.assertNotIn("key.pem text", text)
        self.check(files, ["deployment/encoder", "deployment/gateway", "service/gateway"])

    def test_the_validator_refuses_a_broken_manifest(self):
        # The same check fails where it should: an exported Deployment with
        # a misspelt field and a probe port of the wrong type.
        files = export(self.tmp.name, "broken", DEPLOYMENT)
        path = os.path.join(self.tmp.name, "broken", "encoder.yml")
        with open(path) as f:
            text = f.read()
        self.assertIn("readinessProbe:", text)
        with open(path, "w") as f:
            f.write(text.replace("readinessProbe:", "readinesProbe:", 1))
        code, output = validate(files)
        self.assertNotEqual(code, 0, output)
        self.assertIn("readinesProbe", output)


if __name__ == "__main__":
    unittest.main()
