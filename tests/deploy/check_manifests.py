#!/usr/bin/env python3
"""Cross-checks what deploy/ ships against the daemon this tree builds, without running it:

  * every flag the DaemonSet, the systemd unit, the Containerfile and regcached.conf pass to
    regcached exists in `regcached --helpfull`; every regcachectl command the probes run is in
    `regcachectl --help`;
  * ports: the metrics listen address's port is a containerPort, and probes name only ports the
    container exposes;
  * paths: the daemon's --socket_dir is the DaemonSet's socket volume mount, whose hostPath the
    example application mounts at the directory it connects to; the probes and the systemd
    unit use the same directory;
  * the DaemonSet updates OnDelete (replacing a daemon revokes its node's keys), runs on RDMA
    nodes only and tolerates GPU nodes' taint; every probe has a timeout;
  * the image tag is the project's version (not :latest); the Containerfile's base is pinned,
    builds from source and runs as a non-root user; the ignore files keep build/ and .git out;
  * the unit is Type=notify with LimitMEMLOCK=infinity, passes `systemd-analyze verify`, and its
    `systemd-analyze security` exposure is no worse than the README states.

Usage: check_manifests.py <source-root> <regcached> <regcachectl>
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml  # Debian: python3-yaml (deploy/install-deps.sh)
except ImportError:
    sys.exit("check_manifests: python3-yaml is missing (deploy/install-deps.sh installs it)")

errors = []
notes = []


def check(cond, msg):
    if not cond:
        errors.append(msg)


def run_help(binary, arg):
    # --helpfull lists every flag, the libraries' too, and exits 0; the text is what counts.
    out = subprocess.run([binary, arg], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=30).stdout
    if not out:
        sys.exit(f"check_manifests: {binary} {arg} printed nothing")
    return out


def flag_names(args):
    """The flag names of an argument list: --name=value or --name (absl also takes -name)."""
    names = []
    for a in args:
        m = re.match(r"^--?([A-Za-z0-9_]+)(=.*)?$", a)
        if m:
            names.append(m.group(1).removeprefix("no") if m.group(1).startswith("no")
                         and m.group(2) is None else m.group(1))
    return names


def flag_value(args, name):
    value = None
    for a in args:
        if a.startswith(f"--{name}="):
            value = a.split("=", 1)[1]  # the last one wins, as in absl
    return value


def check_flags(where, names, known):
    for n in names:
        if n in known:
            continue
        errors.append(f"{where}: regcached has no flag --{n}")


def load_daemonset(src):
    with open(os.path.join(src, "deploy/k8s/regcached-daemonset.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    ds = [d for d in docs if d.get("kind") == "DaemonSet"]
    check(len(ds) == 1, "regcached-daemonset.yaml: want exactly one DaemonSet")
    return ds[0]


def load_example(src):
    with open(os.path.join(src, "deploy/k8s/example-app.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    check(len(docs) >= 1 and docs[0].get("kind") == "Pod", "example-app.yaml: want a Pod")
    return docs[0]


def project_version(src):
    with open(os.path.join(src, "CMakeLists.txt")) as f:
        m = re.search(r"project\(regcache\s+VERSION\s+([0-9.]+)", f.read())
    return m.group(1)


def probe_socket_dirs_and_ports(where, container, ctl_out):
    """Checks the probes; returns the socket dirs they name."""
    dirs = []
    ports = {p.get("containerPort") for p in container.get("ports", [])}
    names = {p.get("name") for p in container.get("ports", [])}
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = container.get(kind)
        check(probe is not None or kind == "startupProbe", f"{where}: no {kind}")
        if probe is None:
            continue
        # The default, 1 s, is short for an exec of regcachectl on a loaded node.
        check(probe.get("timeoutSeconds", 1) > 1,
              f"{where}: {kind}: timeoutSeconds {probe.get('timeoutSeconds')}, want above 1 s")
        if "exec" in probe:
            cmd = probe["exec"]["command"]
            check(os.path.basename(cmd[0]) == "regcachectl", f"{where}: {kind} runs {cmd[0]}")
            dirs.append(flag_value(cmd, "socket_dir"))
            words = [c for c in cmd[1:] if not c.startswith("-")]
            for w in words[:1]:
                if re.search(rf"(^|[\s|\[]){re.escape(w)}($|[\s|\]])", ctl_out):
                    continue
                errors.append(f"{where}: {kind}: regcachectl has no command '{w}'")
        for k in ("grpc", "httpGet", "tcpSocket"):
            if k in probe:
                port = probe[k].get("port")
                check(port in ports or port in names,
                      f"{where}: {kind} probes port {port}, not a containerPort")
    return dirs


def check_daemonset(src, known, ctl_out):
    ds = load_daemonset(src)
    spec = ds["spec"]["template"]["spec"]
    c = [x for x in spec["containers"] if x["name"] == "regcached"]
    check(len(c) == 1, "DaemonSet: no container 'regcached'")
    c = c[0]
    args = c.get("args", [])
    check_flags("DaemonSet args", flag_names(args), known)
    version = project_version(src)
    for x in spec.get("initContainers", []) + spec["containers"]:
        image = x["image"]
        check(image.endswith(f":{version}"),
              f"DaemonSet: image {image} is not tagged with the project version {version}")
    check(spec.get("priorityClassName") == "system-node-critical",
          "DaemonSet: priorityClassName is not system-node-critical")
    # Replacing a daemon revokes its node's keys: the operator does it, node by node.
    check(ds["spec"].get("updateStrategy", {}).get("type") == "OnDelete",
          "DaemonSet: updateStrategy is not OnDelete (a RollingUpdate restarts every node)")
    check(spec.get("nodeSelector"), "DaemonSet: no nodeSelector (it would run on non-RDMA nodes)")
    check(any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations") or []),
          "DaemonSet: no toleration of the nvidia.com/gpu taint of GPU nodes")
    res = c.get("resources", {})
    for k in ("requests", "limits"):
        check({"cpu", "memory"} <= set(res.get(k, {})), f"DaemonSet: resources.{k} lacks cpu/memory")
    device = flag_value(args, "device")
    check(device == "auto:rdma",
          f"DaemonSet: --device={device}, want auto:rdma (a real RDMA device chosen at start, "
          "never the sim)")
    # Ports: the metrics listen address's port is exposed.
    metrics = flag_value(args, "metrics_address")
    check(metrics is not None, "DaemonSet: no --metrics_address")
    ports = {p.get("containerPort"): p.get("name") for p in c.get("ports", [])}
    if metrics:
        host, _, port = metrics.rpartition(":")
        check(host not in ("127.0.0.1", "localhost", "[::1]"),
              f"DaemonSet: --metrics_address={metrics} is not reachable from the cluster")
        check(port.isdigit() and int(port) in ports,
              f"DaemonSet: metrics port {port} is not a containerPort ({sorted(ports)})")
    check(flag_value(args, "metrics_port") in (None, "0"),
          "DaemonSet: --metrics_port and --metrics_address both set")
    # Paths: --socket_dir is the socket volume's mount, and the probes use it.
    socket_dir = flag_value(args, "socket_dir")
    check(socket_dir is not None, "DaemonSet: no --socket_dir")
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    check(socket_dir in mounts, f"DaemonSet: --socket_dir={socket_dir} is not a volume mount")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    host_path = volumes.get(mounts.get(socket_dir), {}).get("hostPath", {}).get("path")
    check(host_path is not None, "DaemonSet: the socket directory is not a hostPath volume")
    for d in probe_socket_dirs_and_ports("DaemonSet", c, ctl_out):
        check(d == socket_dir, f"DaemonSet: a probe uses --socket_dir={d}, the daemon {socket_dir}")
    return socket_dir, host_path, version


def check_example(src, host_path):
    pod = load_example(src)
    spec = pod["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    found = False
    for c in spec["containers"]:
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        for m in c.get("volumeMounts", []):
            hp = volumes.get(m["name"], {}).get("hostPath", {}).get("path")
            if hp == host_path:
                found = True
                check(env.get("REGCACHE_SOCKET_DIR") == m["mountPath"],
                      f"example-app: REGCACHE_SOCKET_DIR={env.get('REGCACHE_SOCKET_DIR')} is not "
                      f"where the socket directory is mounted ({m['mountPath']})")
        check(not c["image"].endswith(":latest"), "example-app: image tagged :latest")
    check(found, f"example-app: does not mount the daemon's hostPath {host_path}")


def unit_lines(src):
    with open(os.path.join(src, "deploy/regcached.service")) as f:
        return [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]


def check_unit(src, regcached, known, socket_dir):
    lines = unit_lines(src)
    kv = {}
    for l in lines:
        if "=" in l:
            k, v = l.split("=", 1)
            kv.setdefault(k, []).append(v)
    exec_start = kv["ExecStart"][0].split()
    check(exec_start[0] == "/usr/local/bin/regcached",
          f"unit: ExecStart runs {exec_start[0]}, not what cmake --install puts in place")
    check_flags("unit ExecStart", flag_names(exec_start[1:]), known)
    check(kv.get("Type") == ["notify"], "unit: not Type=notify")
    check(kv.get("LimitMEMLOCK") == ["infinity"], "unit: LimitMEMLOCK is not infinity")
    runtime = kv.get("RuntimeDirectory", [None])[0]
    unit_dir = flag_value(exec_start, "socket_dir")
    check(unit_dir == f"/run/{runtime}",
          f"unit: --socket_dir={unit_dir} is not its RuntimeDirectory /run/{runtime}")
    check(unit_dir == socket_dir, f"unit: --socket_dir={unit_dir}, the DaemonSet's {socket_dir}")

    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        notes.append("unit: not verified (no systemd-analyze on this machine)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        unit = os.path.join(tmp, "regcached.service")
        with open(os.path.join(src, "deploy/regcached.service")) as f:
            text = f.read().replace("ExecStart=/usr/local/bin/regcached", f"ExecStart={regcached}")
        with open(unit, "w") as f:
            f.write(text)
        v = subprocess.run([analyze, "verify", unit], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        check(v.returncode == 0 and not v.stdout.strip(),
              f"unit: systemd-analyze verify: rc={v.returncode} {v.stdout.strip()}")
        s = subprocess.run([analyze, "security", "--offline=true", unit], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", s.stdout)
        if s.returncode != 0 or not m:
            notes.append("unit: systemd-analyze security --offline=true unsupported here")
            return
    with open(os.path.join(src, "README.md")) as f:
        stated = re.search(r"exposure (?:level )?([0-9]+\.[0-9])", f.read())
    check(stated is not None, "README: no systemd-analyze security exposure stated")
    if stated:
        check(float(m.group(1)) <= float(stated.group(1)),
              f"unit: exposure {m.group(1)} is worse than the README's {stated.group(1)}")
    notes.append(f"unit: verified; exposure {m.group(1)}")


def check_containerfile(src, known, version):
    with open(os.path.join(src, "deploy/Containerfile")) as f:
        text = f.read()
    base = re.search(r"^ARG BASE=(\S+)", text, re.M)
    check(base is not None and re.search(r":[a-z]+-\d{8}(-slim)?@sha256:[0-9a-f]{64}$",
                                         base.group(1)),
          "Containerfile: the base image is not pinned by a dated tag and a digest")
    for frm in re.findall(r"^FROM\s+(\S+)", text, re.M):
        check(frm == "${BASE}", f"Containerfile: FROM {frm} is not the pinned base")
    for copy in re.findall(r"^COPY\s+(?!--from=)(.*)$", text, re.M):
        check(not any(w.startswith(("build", "./build")) for w in copy.split()[:-1]),
              f"Containerfile: COPY {copy} copies a built tree")
    check(re.search(r"^COPY \. ", text, re.M) is not None, "Containerfile: does not build from source")
    user = re.findall(r"^USER\s+(\S+)", text, re.M)
    check(user and not user[-1].startswith(("0", "root")), "Containerfile: runs as root")
    entry = re.search(r"^ENTRYPOINT\s+(\[.*\])", text, re.M)
    check(entry is not None, "Containerfile: no ENTRYPOINT")
    if entry:
        argv = yaml.safe_load(entry.group(1))
        check_flags("Containerfile ENTRYPOINT", flag_names(argv[1:]), known)
    check(f"regcached:{version}" in text, f"Containerfile: the example tag is not {version}")
    for name in (".containerignore", ".dockerignore"):
        path = os.path.join(src, name)
        check(os.path.exists(path), f"{name} missing")
        if os.path.exists(path):
            with open(path) as f:
                entries = {l.strip().rstrip("/") for l in f if l.strip() and l[0] != "#"}
            check({"build", ".git"} <= entries, f"{name}: does not exclude build/ and .git")


def check_conf(src, known):
    with open(os.path.join(src, "deploy/regcached.conf")) as f:
        args = [l.strip() for l in f if l.strip().startswith("--")]
    check_flags("regcached.conf", flag_names(args), known)


def main():
    src, regcached, regcachectl = (os.path.abspath(a) for a in sys.argv[1:4])
    help_out = run_help(regcached, "--helpfull")
    known = set(re.findall(r"^\s+--([A-Za-z0-9_]+) \(", help_out, re.M))
    check("socket_dir" in known and "device" in known,
          "regcached --helpfull: could not read the flags")
    ctl_out = run_help(regcachectl, "--help")
    socket_dir, host_path, version = check_daemonset(src, known, ctl_out)
    check_example(src, host_path)
    check_unit(src, regcached, known, socket_dir)
    check_containerfile(src, known, version)
    check_conf(src, known)
    for n in dict.fromkeys(notes):
        print(f"note: {n}")
    for e in errors:
        print(f"FAIL: {e}")
    if errors:
        return 1
    print(f"deploy manifests: consistent with regcached ({len(known)} flags)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
