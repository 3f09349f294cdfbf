"""Peak memory of reading a dump (kvtool verify streams every slice) does not grow with L·H_kv."""
import os
import resource
import subprocess

from common import KVTOOL, check, run, workdir


def peak_kib(*args):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of children is the max over all waited-for children, so measure each in a fresh
    # python child that reports its own child's peak.
    code = ("import resource,subprocess,sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL);"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run(["/usr/bin/python3", "-c", code, *map(str, args)], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


with workdir() as w:
    small, large = os.path.join(w, "small.h5"), os.path.join(w, "large.h5")
    common = ["--head-dim", 64, "--tokens", 4096, "--seed", 1, "--dtype", "f16", "--query-count", 0, "-q"]
    run(KVTOOL, "synth", "--layers", 1, "--kv-heads", 1, "--q-heads", 1, *common, "-o", small)
    run(KVTOOL, "synth", "--layers", 16, "--kv-heads", 8, "--q-heads", 8, *common, "-o", large)
    size_small, size_large = os.path.getsize(small), os.path.getsize(large)
    for cmd in ("verify", "inspect"):
        a, b = peak_kib(KVTOOL, cmd, small), peak_kib(KVTOOL, cmd, large)
        print(f"{cmd}: peak RSS {a} KiB for a {size_small >> 10} KiB dump, {b} KiB for a {size_large >> 10} KiB dump (L*H x128)")
        check(b < a * 1.5 + 8192, f"{cmd}: peak RSS grew from {a} to {b} KiB with L*H")
        check(b * 1024 < size_large / 4, f"{cmd}: peak RSS {b} KiB is not far below the dump size")
print("ok")
