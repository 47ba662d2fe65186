"""NUMA placement on synthetic sysfs/procfs trees (the machines here have one node)."""

from __future__ import annotations

from pathlib import Path

from memtop.collectors import numa


def _tree(root: Path, nodes: dict[int, str], gpu_bus: str | None = None, gpu_node: int = -1) -> None:
    for n, cpus in nodes.items():
        d = root / f"sys/devices/system/node/node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
        (d / "meminfo").write_text(
            f"Node {n} MemTotal:       1048576 kB\nNode {n} MemFree:         524288 kB\n"
        )
        (d / "numastat").write_text("numa_hit 1000\nnuma_miss 10\nnuma_foreign 5\nother_node 20\n")
    if gpu_bus:
        d = root / "sys/bus/pci/devices" / gpu_bus
        d.mkdir(parents=True)
        (d / "numa_node").write_text(f"{gpu_node}\n")


def _proc(root: Path, pid: int, cpus_run: list[int], allowed: str = "0-7") -> None:
    d = root / f"proc/{pid}"
    (d / "task").mkdir(parents=True)
    (d / "status").write_text(f"Name:\tpython\nCpus_allowed_list:\t{allowed}\nMems_allowed_list:\t0-1\n")
    for i, cpu in enumerate(cpus_run):
        t = d / "task" / str(pid + i)
        t.mkdir()
        fields = ["S"] + ["0"] * 35 + [str(cpu)] + ["0"] * 10
        t.joinpath("stat").write_text(f"{pid + i} (py thon) " + " ".join(fields) + "\n")


def test_cpulist_parsing():
    assert numa.parse_cpulist("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert numa.parse_cpulist("") == set()


def test_bus_id_normalisation():
    assert numa.sysfs_bus_id("00000000:1A:00.0") == "0000:1a:00.0"


def test_process_on_node0_with_gpu_on_node1_is_remote(tmp_path):
    _tree(tmp_path, {0: "0-3", 1: "4-7"}, "0000:1a:00.0", 1)
    _proc(tmp_path, 100, [0, 1, 2])
    nodes = numa.NumaReader(tmp_path).read(0.0)
    gnode = numa.gpu_node(tmp_path, "00000000:1A:00.0")
    assert gnode == 1 and len(nodes) == 2
    used = numa.last_cpus(tmp_path, 100)
    assert used == (0, 1, 2)
    assert numa.placement(gnode, nodes, used) == "remote"
    assert numa.proc_allowed(tmp_path, 100) == ("0-7", "0-1")


def test_local_and_split(tmp_path):
    _tree(tmp_path, {0: "0-3", 1: "4-7"})
    nodes = numa.NumaReader(tmp_path).read(0.0)
    assert numa.placement(1, nodes, (4, 5)) == "local"
    assert numa.placement(1, nodes, (3, 4)) == "split"


def test_one_node_or_unknown_gpu_node_is_not_applicable(tmp_path):
    _tree(tmp_path, {0: "0-7"}, "0000:00:06.0", -1)
    nodes = numa.NumaReader(tmp_path).read(0.0)
    assert numa.placement(0, nodes, (1,)) == "n/a"
    assert numa.gpu_node(tmp_path, "00000000:00:06.0") == -1
    assert numa.gpu_node(tmp_path, "00000000:99:00.0") == -1  # no such device


def test_numastat_rates_from_deltas(tmp_path):
    _tree(tmp_path, {0: "0-3", 1: "4-7"})
    r = numa.NumaReader(tmp_path)
    r.read(10.0)
    (tmp_path / "sys/devices/system/node/node1/numastat").write_text(
        "numa_hit 3000\nnuma_miss 110\nnuma_foreign 5\nother_node 220\n"
    )
    n0, n1 = r.read(12.0)
    assert (
        n0.miss_rate == 0 and n1.miss_rate == 50.0 and n1.other_node_rate == 100.0 and n1.hit_rate == 1000.0
    )


def test_real_machine_layout_reads():
    nodes = numa.NumaReader().read(0.0)
    assert nodes and all(n.mem_total > 0 for n in nodes)
