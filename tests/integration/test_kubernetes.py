"""deploy/kubernetes validated offline (label unit): every manifest parses, each object has the
fields its kind requires, and the objects agree with each other and with inferd: selectors
match the pod labels, the probes, Service, pool and container use the port inferd listens on,
the listener runs with the API key file from the mounted Secret, probes and the metrics scrape
(Prometheus, the InferencePool's endpoint picker) hit routes that need no key, the HPA scales
the Deployment on a metric inferd exports, the InferenceModel names the served model id and
its pool. `kubectl kustomize` renders the directory when kubectl exists.

Usage: test_kubernetes.py SOURCE_DIR   (run by the venv's python: $INFERD_PYTHON)
"""
import os
import re
import shutil
import subprocess
import sys

try:
    import yaml
except ImportError as e:  # pragma: no cover
    print("SKIPPED: PyYAML missing (%s): run deploy/install-deps.sh" % e)
    sys.exit(77)

SRC = sys.argv[1] if len(sys.argv) > 1 else "."
DIR = os.path.join(SRC, "deploy", "kubernetes")
REQUIRED = {  # kind -> dotted paths that must exist
    "Deployment": ["spec.selector.matchLabels", "spec.template.metadata.labels",
                   "spec.template.spec.containers"],
    "Service": ["spec.selector", "spec.ports"],
    "PersistentVolumeClaim": ["spec.accessModes", "spec.resources.requests.storage"],
    "HorizontalPodAutoscaler": ["spec.scaleTargetRef.name", "spec.maxReplicas", "spec.metrics"],
    "InferencePool": ["spec.targetPortNumber", "spec.selector", "spec.extensionRef.name"],
    "InferenceModel": ["spec.modelName", "spec.poolRef.name"],
}


def get(o, path):
    for p in path.split("."):
        if not isinstance(o, dict) or p not in o:
            return None
        o = o[p]
    return o


def main():
    kust = yaml.safe_load(open(os.path.join(DIR, "kustomization.yaml")))
    objs = []
    for f in kust["resources"]:
        for doc in yaml.safe_load_all(open(os.path.join(DIR, f))):
            assert doc and doc.get("apiVersion") and doc.get("kind"), (f, doc)
            assert get(doc, "metadata.name"), (f, "metadata.name")
            for path in REQUIRED.get(doc["kind"], []):
                assert get(doc, path) is not None, (f, doc["kind"], path)
            objs.append(doc)
    by = {}
    for o in objs:
        by.setdefault(o["kind"], []).append(o)
    for kind in REQUIRED:
        assert kind in by, "no %s in deploy/kubernetes" % kind
    dep = by["Deployment"][0]
    labels = get(dep, "spec.template.metadata.labels")
    assert get(dep, "spec.selector.matchLabels").items() <= labels.items()
    c = get(dep, "spec.template.spec.containers")[0]
    args = dict(a[2:].split("=", 1) for a in c["args"])
    port = int(args["listen"].rsplit(":", 1)[1])
    names = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert names["http"] == port
    # the key file comes from the Secret volume
    key_dir = os.path.dirname(args["api-key-file"])
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in get(dep, "spec.template.spec.volumes")}
    assert "secret" in vols[mounts[key_dir]], "the API key must come from a Secret"
    items = vols[mounts[key_dir]]["secret"]["items"]
    assert os.path.basename(args["api-key-file"]) in [i["path"] for i in items]
    model = args["model"]
    assert any(model.startswith(m) for m in mounts), "the model path must be on a volume"
    # probes and the metrics scrape: routes that need no key on TCP (daemon/api.c route table)
    api = open(os.path.join(SRC, "daemon", "api.c")).read()

    def open_route(path):
        return re.search(r'\{"%s", HTTP_GET, \w+, true' % re.escape(path), api)
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        hg = c[probe]["httpGet"]
        assert hg["port"] in ("http", port)
        assert open_route(hg["path"]), "%s uses %s, which needs the API key" % (probe, hg["path"])
    # Prometheus scrapes the annotated path; the InferencePool's endpoint picker reads
    # /metrics (its default) on targetPortNumber: neither sends the key
    ann = get(dep, "spec.template.metadata.annotations")
    assert ann["prometheus.io/scrape"] == "true"
    assert int(ann["prometheus.io/port"]) == port
    assert open_route(ann["prometheus.io/path"]), \
        "Prometheus scrapes %s, which needs the API key" % ann["prometheus.io/path"]
    assert open_route("/metrics"), "the endpoint picker scrapes /metrics, which needs the API key"
    # one pod per GPU node
    anti = get(dep, "spec.template.spec.affinity.podAntiAffinity")
    term = anti["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= labels.items()
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    # the daemon starts one CUDA worker per listed GPU: as many as the pod gets
    assert len(args.get("gpus", "").split(",")) == c["resources"]["limits"]["nvidia.com/gpu"], \
        "--gpus must list the pod's GPUs"
    svc = by["Service"][0]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert svc["spec"]["ports"][0]["targetPort"] in ("http", port)
    pool = by["InferencePool"][0]
    assert pool["spec"]["targetPortNumber"] == port
    assert pool["spec"]["selector"].items() <= labels.items()
    im = by["InferenceModel"][0]
    assert im["spec"]["poolRef"]["name"] == pool["metadata"]["name"]
    # the model id inferd serves: the file name without .gguf
    assert im["spec"]["modelName"] == os.path.basename(model).removesuffix(".gguf")
    hpa = by["HorizontalPodAutoscaler"][0]
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment"
    assert hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]
    metric = hpa["spec"]["metrics"][0]["pods"]["metric"]["name"]
    metrics_c = open(os.path.join(SRC, "daemon", "metrics.c")).read()
    assert '"%s"' % metric in metrics_c, "inferd exports no metric %s" % metric
    pvc = by["PersistentVolumeClaim"][0]
    assert vols["models"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    kubectl = shutil.which("kubectl")
    if kubectl:
        out = subprocess.run([kubectl, "kustomize", DIR], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        rendered = list(yaml.safe_load_all(out.stdout))
        assert len(rendered) == len(objs), (len(rendered), len(objs))
        print("kubectl kustomize: %d objects" % len(rendered))
    else:
        print("kubectl not installed: the kustomize render was not checked")
    print("deploy/kubernetes: %d objects consistent" % len(objs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
