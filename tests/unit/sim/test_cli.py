"""``aicenter simulate`` through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from aicenter.cli.simulate import simulate

app = typer.Typer()
app.command("simulate")(simulate)
app.command("noop")(lambda: None)  # two commands keep typer from collapsing the app into one command
runner = CliRunner()


def test_replay_writes_json_and_plot(philly_slice: Path, tmp_path: Path) -> None:
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(philly_slice),
            "--from",
            "2017-10-01",
            "--to",
            "2017-11-01",
            "--cluster",
            "4x8",
            "--leaf-size",
            "2",
            "--policy",
            "fifo",
            "--policy",
            "tiresias",
            "--limit",
            "80",
            "--json",
            str(out),
            "--plot",
            str(png),
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert [r["policy"] for r in doc["results"]] == ["fifo", "tiresias"]
    assert doc["cluster"]["gpus"] == 32
    assert "avg JCT" in result.stdout
    assert png.stat().st_size > 1000


def test_fill_mode_prints_unallocated(openb_pods_slice: Path, openb_nodes_slice: Path) -> None:
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(openb_pods_slice),
            "--nodes",
            str(openb_nodes_slice),
            "--mode",
            "fill",
            "--policy",
            "best-fit",
            "--json",
            "-",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["results"][0]["fill"]["unallocated_gpus"] >= 0


def test_policy_document(philly_slice: Path, tmp_path: Path) -> None:
    policy = tmp_path / "mine.yaml"
    policy.write_text("base: fifo\nbackfill: greedy\n")
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(philly_slice),
            "--cluster",
            "2x8",
            "--policy",
            str(policy),
            "--limit",
            "20",
            "--json",
            "-",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["results"][0]["policy"] == "fifo"


def one_error_line(args: list[str]) -> str:
    result = runner.invoke(app, ["simulate", *args])
    assert result.exit_code == 2
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: ")
    return lines[0]


def test_bad_inputs_get_one_line(tmp_path: Path, philly_slice: Path) -> None:
    bad = tmp_path / "bad_philly.csv"
    bad.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,x,1,1,a\n")
    assert "philly.csv:2: column duration" in one_error_line(["--trace", str(bad), "--cluster", "2x8"])
    assert "no such file" in one_error_line(["--trace", str(tmp_path / "none.csv"), "--cluster", "2x8"])
    assert "unknown policy" in one_error_line(["--trace", str(philly_slice), "--cluster", "2x8", "--policy", "nope"])
    assert "96x8" in one_error_line(["--trace", str(philly_slice), "--cluster", "lots"])
    assert "--mode" in one_error_line(["--trace", str(philly_slice), "--cluster", "2x8", "--mode", "x"])
    assert "--from" in one_error_line(["--trace", str(philly_slice), "--cluster", "2x8", "--from", "soon"])
    policy = tmp_path / "bad.yaml"
    policy.write_text("queue_order: fastest\n")
    assert "queue_order" in one_error_line(["--trace", str(philly_slice), "--cluster", "2x8", "--policy", str(policy)])


def test_fill_mode_takes_an_openb_pod_list_of_resource_columns_only(tmp_path: Path) -> None:
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        + "".join(f"p-{i},4000,8192,{1 + i % 2},{500 if i % 2 == 0 else 1000}\n" for i in range(40))
    )
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn-1,96000,786432,8,V100M32\nn-2,96000,786432,8,V100M32\n")
    result = runner.invoke(
        app,
        ["simulate", "--trace", str(pods), "--nodes", str(nodes), "--mode", "fill", "--json", "-", "--quiet"],
    )
    assert result.exit_code == 0, result.output
    fill = json.loads(result.stdout)["results"][0]["fill"]
    assert fill["tasks_placed"] > 0
    assert fill["total_gpus"] == 16
