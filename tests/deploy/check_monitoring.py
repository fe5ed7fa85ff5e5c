#!/usr/bin/env python3
"""Checks what deploy/ ships for monitoring against the DaemonSet and docs/metrics.md, without
a build:

  * deploy/k8s/podmonitor.yaml: a monitoring.coreos.com/v1 PodMonitor that selects the
    DaemonSet's pods (its matchLabels are labels of the pod template, in the DaemonSet's
    namespace) and scrapes /metrics on a port name the regcached container exposes, the one
    --metrics_address listens on;
  * deploy/monitoring/regcached-alerts.yaml: a rule file of alerting rules only (so that its
    `groups` can be a PrometheusRule's spec as they are), each with a severity label and summary
    and description annotations, whose job matchers name the job the PodMonitor gives, and
    whose texts name only regcachectl commands that exist (tools/regcachectl_main.cc);
  * deploy/monitoring/grafana-dashboard.json: parses, schemaVersion 36 or later, every
    datasource the ${DS_PROMETHEUS} input, a `device` variable over a metric documented with
    that label, every variable an expression uses defined, every panel with a target;
  * every metric an alert, a panel or a variable reads is in the tables of docs/metrics.md (a
    histogram only through _bucket, _sum or _count), and every label matcher names a label the
    metric is documented with or one the scrape adds (the PodMonitor's relabelings included);
  * where promtool is on PATH: `promtool check rules` on the rule file and on the dashboard's
    expressions (as recording rules, its variables replaced), and `promtool test rules` on
    tests/deploy/regcached-alerts_test.yaml (run against a copy of the rules without their
    annotations, which the tests would otherwise have to repeat word for word). Without
    promtool that part is skipped, and the output says so.

Usage: check_monitoring.py [<source-root>]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml  # Debian: python3-yaml (deploy/install-deps.sh)
except ImportError:
    sys.exit("check_monitoring: python3-yaml is missing (deploy/install-deps.sh installs it)")

DAEMONSET = "deploy/k8s/regcached-daemonset.yaml"
PODMONITOR = "deploy/k8s/podmonitor.yaml"
RULES = "deploy/monitoring/regcached-alerts.yaml"
DASHBOARD = "deploy/monitoring/grafana-dashboard.json"
RULE_TESTS = "tests/deploy/regcached-alerts_test.yaml"

# Labels Prometheus Operator puts on every target of a PodMonitor, besides its relabelings'.
SCRAPE_LABELS = {"job", "instance", "namespace", "pod", "container", "endpoint"}
# Series Prometheus makes itself for every target.
SCRAPE_SERIES = {"up"}
SEVERITIES = {"critical", "warning", "info"}
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s"}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and",
                "or", "unless", "offset", "inf", "nan", "atan2"}

errors = []
notes = []


def check(cond, msg):
    if not cond:
        errors.append(msg)


def read(src, path):
    with open(os.path.join(src, path)) as f:
        return f.read()


# docs/metrics.md -------------------------------------------------------------------------------

def documented_metrics(src):
    """{name: (type, {labels})} from the tables of docs/metrics.md."""
    out = {}
    row = re.compile(r"^\|\s*`([a-zA-Z_:][a-zA-Z0-9_:]*)`\s*\|\s*(counter|gauge|histogram)\s*\|"
                     r"([^|]*)\|")
    for line in read(src, "docs/metrics.md").splitlines():
        m = row.match(line)
        if m:
            out[m.group(1)] = (m.group(2), set(re.findall(r"`([a-zA-Z_][a-zA-Z0-9_]*)`",
                                                          m.group(3))))
    check(len(out) > 50, f"docs/metrics.md: only {len(out)} metrics found in its tables")
    return out


def metric_labels(name, docs, where):
    """The labels a series of `name` may carry beyond the scrape's; None when unknown."""
    if name in SCRAPE_SERIES:
        return set()
    if name in docs:
        kind, labels = docs[name]
        if kind == "histogram":
            errors.append(f"{where}: {name} is a histogram: read {name}_bucket, _sum or _count")
            return None
        return labels
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[:-len(suffix)]
        if name.endswith(suffix) and docs.get(base, ("", None))[0] == "histogram":
            return docs[base][1] | ({"le"} if suffix == "_bucket" else set())
    errors.append(f"{where}: metric {name} is not in docs/metrics.md")
    return None


# PromQL, as far as these checks need it --------------------------------------------------------

STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^{}]*)\}")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")')


def selectors(expr):
    """[(metric or None, [(label, op, value)])] of the expression's selectors with matchers."""
    out = []
    for m in SELECTOR.finditer(expr):
        matchers = [(l, op, json.loads(v)) for l, op, v in MATCHER.findall(m.group(2))]
        out.append((m.group(1), matchers))
    return out


def metric_names(expr):
    """The metric names an expression reads: identifiers that are not functions, keywords,
    labels of by/without/on/ignoring, numbers, durations or Grafana variables."""
    s = STRING.sub('""', expr)
    s = re.sub(r"\{[^{}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = []
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        before = s[m.start() - 1] if m.start() > 0 else " "
        if before.isdigit() or before in "$.":  # 1e3, 5m, $node
            continue
        if s[m.end():].lstrip().startswith("(") or m.group(0) in PROMQL_WORDS:
            continue
        names.append(m.group(0))
    return names


def check_expr(expr, where, docs, target_labels, job):
    names = metric_names(expr)
    check(names, f"{where}: reads no metric: {expr!r}")
    for name in names:
        metric_labels(name, docs, where)
    for name, matchers in selectors(expr):
        if name is None:
            errors.append(f"{where}: a selector without a metric name ({expr!r})")
            continue
        known = metric_labels(name, docs, where)
        if known is None:
            continue
        for label, _, value in matchers:
            check(label in known or label in target_labels,
                  f"{where}: {name} has no label {label} (docs/metrics.md: "
                  f"{sorted(known) or 'none'}; the scrape's: {sorted(target_labels)})")
            if label == "job" and job is not None:
                check(value == job, f"{where}: job=\"{value}\", the PodMonitor's job is {job}")


# The DaemonSet and the PodMonitor --------------------------------------------------------------

def load_yaml_docs(src, path):
    with open(os.path.join(src, path)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def flag_value(args, name):
    value = None
    for a in args:
        if a.startswith(f"--{name}="):
            value = a.split("=", 1)[1]
    return value


def check_podmonitor(src):
    """Returns (job, target labels) of the PodMonitor's targets."""
    ds = [d for d in load_yaml_docs(src, DAEMONSET) if d.get("kind") == "DaemonSet"][0]
    ds_ns = ds["metadata"].get("namespace", "default")
    template = ds["spec"]["template"]
    pod_labels = template["metadata"].get("labels", {})
    container = [c for c in template["spec"]["containers"] if c["name"] == "regcached"][0]
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports", [])}
    metrics_address = flag_value(container.get("args", []), "metrics_address") or ""
    metrics_port = metrics_address.rpartition(":")[2]

    docs = load_yaml_docs(src, PODMONITOR)
    check(len(docs) == 1, f"{PODMONITOR}: want exactly one document")
    pm = docs[0]
    check(pm.get("apiVersion") == "monitoring.coreos.com/v1" and pm.get("kind") == "PodMonitor",
          f"{PODMONITOR}: not a monitoring.coreos.com/v1 PodMonitor")
    meta, spec = pm.get("metadata", {}), pm.get("spec", {})
    pm_ns = meta.get("namespace", "default")
    ns_sel = spec.get("namespaceSelector", {})
    check(not ns_sel.get("any", False), f"{PODMONITOR}: namespaceSelector.any scrapes everywhere")
    scraped = ns_sel.get("matchNames", [pm_ns])
    check(ds_ns in scraped,
          f"{PODMONITOR}: scrapes namespaces {scraped}, the DaemonSet is in {ds_ns}")
    selector = spec.get("selector", {})
    check(not selector.get("matchExpressions"),
          f"{PODMONITOR}: matchExpressions are not checked here; use matchLabels")
    match = selector.get("matchLabels", {})
    check(match, f"{PODMONITOR}: an empty selector scrapes every pod of the namespace")
    for k, v in match.items():
        check(pod_labels.get(k) == v,
              f"{PODMONITOR}: selects {k}={v}, the DaemonSet's pods carry {k}={pod_labels.get(k)}")
    endpoints = spec.get("podMetricsEndpoints", [])
    check(endpoints, f"{PODMONITOR}: no podMetricsEndpoints")
    target_labels = set(SCRAPE_LABELS)
    for e in endpoints:
        port = e.get("port")
        check(port in ports, f"{PODMONITOR}: port {port!r} is not a named port of the regcached "
                             f"container ({sorted(n for n in ports if n)})")
        check(port not in ports or str(ports[port]) == metrics_port,
              f"{PODMONITOR}: port {port} is {ports.get(port)}, --metrics_address listens on "
              f"{metrics_port}")
        check(e.get("path", "/metrics") == "/metrics", f"{PODMONITOR}: path {e.get('path')}")
        check("interval" in e, f"{PODMONITOR}: no scrape interval")
        for r in e.get("relabelings", []):
            if r.get("targetLabel"):
                target_labels.add(r["targetLabel"])
    job_label = spec.get("jobLabel")
    if job_label:
        check(job_label in pod_labels, f"{PODMONITOR}: jobLabel {job_label} is not a pod label")
        job = pod_labels.get(job_label)
    else:
        job = f"{pm_ns}/{meta.get('name')}"
    return job, target_labels


# Rules -------------------------------------------------------------------------------------------

def regcachectl_commands(src):
    text = read(src, "tools/regcachectl_main.cc")
    usage = re.search(r"Commands\..*?\n(.*?)\nFlags:", text, re.S)
    check(usage is not None, "tools/regcachectl_main.cc: could not read the usage's commands")
    return set(re.findall(r"^  ([a-z]+)\b", usage.group(1) if usage else "", re.M))


def check_regcachectl_mentions(text, where, commands):
    """A command line is quoted (`regcachectl stats`) or follows `kubectl exec ... --`."""
    found = 0
    for m in re.finditer(r"(?:`|--\s+)regcachectl(?:\s+--?[a-zA-Z_-]+(?:=\S+)?)*\s+([a-z]+)",
                         text):
        found += 1
        check(m.group(1) in commands,
              f"{where}: names `regcachectl {m.group(1)}`, not a command ({sorted(commands)})")
    return found


def check_rules(src, docs, target_labels, job, commands):
    doc = yaml.safe_load(read(src, RULES))
    check(isinstance(doc, dict) and set(doc) == {"groups"},
          f"{RULES}: the top level must be `groups` alone (a PrometheusRule's spec)")
    alerts = []
    for g in (doc or {}).get("groups", []):
        for r in g.get("rules", []):
            name = r.get("alert")
            where = f"{RULES}: {name or r.get('record')}"
            check(name is not None, f"{where}: not an alerting rule")
            alerts.append(name)
            check_expr(str(r.get("expr", "")), where, docs, target_labels, job)
            check(r.get("labels", {}).get("severity") in SEVERITIES,
                  f"{where}: severity {r.get('labels', {}).get('severity')!r}, want one of "
                  f"{sorted(SEVERITIES)}")
            ann = r.get("annotations", {})
            for k in ("summary", "description"):
                check(str(ann.get(k, "")).strip(), f"{where}: no {k} annotation")
            check(check_regcachectl_mentions(str(ann.get("description", "")), where, commands),
                  f"{where}: the description names no regcachectl command to run")
    check(len(alerts) == len(set(alerts)), f"{RULES}: an alert name repeats")
    for want in ("RegcachedDown",):
        check(want in alerts, f"{RULES}: no {want} alert")
    return doc, alerts


def dashboard_as_rules(exprs):
    """The dashboard's expressions as recording rules, its variables replaced by values a query
    could get, so that promtool parses them too."""
    values = {"node": ".*", "device": ".*", "__rate_interval": "1m", "__interval": "1m",
              "__range": "1h"}
    rules = []
    for i, e in enumerate(exprs):
        e = re.sub(r"\$\{?([a-zA-Z_][a-zA-Z0-9_]*)\}?", lambda m: values.get(m.group(1), ".*"), e)
        rules.append({"record": f"dashboard_check:expr_{i}", "expr": e})
    return {"groups": [{"name": "dashboard", "rules": rules}]}


def run_promtool(src, rules_doc, alerts, dashboard_exprs):
    promtool = shutil.which("promtool")
    if promtool is None:
        print("SKIPPED: promtool is not on PATH: `promtool check rules` (the rules, the "
              "dashboard's expressions) and the rule unit tests did not run (Debian package "
              "prometheus; deploy/install-deps.sh)")
        return
    c = subprocess.run([promtool, "check", "rules", os.path.join(src, RULES)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    check(c.returncode == 0, f"promtool check rules {RULES}: rc={c.returncode}\n{c.stdout}")
    if c.returncode == 0:
        notes.append("promtool check rules: passed")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "dashboard.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(dashboard_as_rules(dashboard_exprs), f, sort_keys=False)
        d = subprocess.run([promtool, "check", "rules", path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
    check(d.returncode == 0, f"{DASHBOARD}: promtool does not parse its expressions\n{d.stdout}")
    if d.returncode == 0:
        notes.append(f"promtool parses the dashboard's {len(dashboard_exprs)} expressions")
    tests = yaml.safe_load(read(src, RULE_TESTS))
    tested = {t.get("alertname") for case in tests.get("tests", [])
              for t in case.get("alert_rule_test", [])}
    for a in alerts:
        check(a in tested, f"{RULE_TESTS}: no test of {a}")
    with tempfile.TemporaryDirectory() as tmp:
        bare = {"groups": [dict(g, rules=[{k: v for k, v in r.items() if k != "annotations"}
                                           for r in g.get("rules", [])])
                           for g in rules_doc.get("groups", [])]}
        with open(os.path.join(tmp, "rules.yaml"), "w") as f:
            yaml.safe_dump(bare, f, sort_keys=False)
        tests["rule_files"] = ["rules.yaml"]
        with open(os.path.join(tmp, "test.yaml"), "w") as f:
            yaml.safe_dump(tests, f, sort_keys=False)
        t = subprocess.run([promtool, "test", "rules", "test.yaml"], cwd=tmp,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
    check(t.returncode == 0, f"promtool test rules {RULE_TESTS}: rc={t.returncode}\n{t.stdout}")
    if t.returncode == 0:
        notes.append(f"promtool test rules: passed ({len(tested)} alerts tested)")


# Dashboard ---------------------------------------------------------------------------------------

def datasources(node, path="$"):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "datasource":
                yield path, v
            else:
                yield from datasources(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from datasources(v, f"{path}[{i}]")


def all_panels(panels):
    for p in panels:
        yield p
        yield from all_panels(p.get("panels", []))


def check_dashboard(src, docs, target_labels, exprs):
    """Checks the dashboard, appending its targets' expressions to `exprs`; returns its number
    of panels."""
    try:
        dash = json.loads(read(src, DASHBOARD))
    except json.JSONDecodeError as e:
        errors.append(f"{DASHBOARD}: not JSON: {e}")
        return 0
    check(dash.get("schemaVersion", 0) >= 36,
          f"{DASHBOARD}: schemaVersion {dash.get('schemaVersion')}, want 36 or later")
    inputs = {i.get("name"): i for i in dash.get("__inputs", [])}
    ds_in = inputs.get("DS_PROMETHEUS", {})
    check(ds_in.get("type") == "datasource" and ds_in.get("pluginId") == "prometheus",
          f"{DASHBOARD}: no Prometheus datasource input DS_PROMETHEUS")
    for path, ds in datasources({k: v for k, v in dash.items() if k != "__inputs"}):
        check(isinstance(ds, dict) and ds.get("uid") == "${DS_PROMETHEUS}",
              f"{DASHBOARD}: {path} is {ds!r}, not the ${{DS_PROMETHEUS}} input")
    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    check("device" in variables, f"{DASHBOARD}: no `device` variable")
    for name, v in variables.items():
        where = f"{DASHBOARD}: variable {name}"
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*", q or "")
        check(m is not None, f"{where}: not a label_values(metric, label) query: {q!r}")
        if not m:
            continue
        check_expr(m.group(1), where, docs, target_labels, None)
        for metric in metric_names(m.group(1)):
            known = metric_labels(metric, docs, where)
            if known is not None:
                check(m.group(2) in known or m.group(2) in target_labels,
                      f"{where}: {metric} has no label {m.group(2)}")
    ids = []
    count = 0
    for p in all_panels(dash.get("panels", [])):
        ids.append(p.get("id"))
        if p.get("type") == "row":
            continue
        count += 1
        where = f"{DASHBOARD}: panel {p.get('title')!r}"
        targets = p.get("targets", [])
        check(targets, f"{where}: no target")
        for t in targets:
            expr = t.get("expr", "")
            check(expr.strip() and t.get("refId"), f"{where}: a target without expr or refId")
            check_expr(expr, where, docs, target_labels, None)
            exprs.append(expr)
            for var in re.findall(r"\$\{?([a-zA-Z_][a-zA-Z0-9_]*)", expr):
                check(var in variables or var in GRAFANA_BUILTINS,
                      f"{where}: uses ${var}, not a variable of the dashboard")
    check(count > 0, f"{DASHBOARD}: no panels")
    check(len(ids) == len(set(ids)), f"{DASHBOARD}: panel ids repeat")
    return count


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(here))
    docs = documented_metrics(src)
    job, target_labels = check_podmonitor(src)
    commands = regcachectl_commands(src)
    rules_doc, alerts = check_rules(src, docs, target_labels, job, commands)
    dashboard_exprs = []
    panels = check_dashboard(src, docs, target_labels, dashboard_exprs)
    if not errors:
        run_promtool(src, rules_doc, alerts, dashboard_exprs)
    for n in notes:
        print(f"note: {n}")
    for e in dict.fromkeys(errors):  # a metric read twice in one expression is told once
        print(f"FAIL: {e}")
    if errors:
        return 1
    print(f"deploy monitoring: consistent (job {job}; {len(alerts)} alerts, {panels} panels, "
          f"{len(docs)} documented metrics)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
