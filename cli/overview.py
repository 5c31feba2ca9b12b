"""``sparsesim algorithms | demo``: what is registered, and the tour on the embedded data set."""

from __future__ import annotations

import typer

from .common import echo_line, emit, progress_bar, show_progress, app


@app.command("algorithms")
def algorithms_cmd(json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout.")):
    """List registered algorithms."""
    from sparsesim.registry import ALGORITHMS

    rows = [{"name": s.name, "kind": s.kind, "summary": s.summary} for s in ALGORITHMS.values()]
    if json_out:
        emit({"algorithms": rows})
        return
    for row in rows:
        echo_line(f"{row['name']:<18}{row['kind']:<24}{row['summary']}")


@app.command()
def demo(
    triplets: int = typer.Option(3000, "--triplets", "-n"),
    seed: int = typer.Option(0, "--seed"),
    top_k: int = typer.Option(5, "--top-k", "-k"),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
):
    """The quickstart on the embedded 20 Newsgroups sample: train OASIS, compare it with proxy-ssi
    and the baselines a user tries first (cosine, LSA, a classifier embedding), show the nearest
    neighbours of a document."""
    from sparsesim.validation import check_int, check_n_triplets

    check_n_triplets(triplets, "--triplets")
    check_int(seed, "--seed", 0, 2**32 - 1)
    check_int(top_k, "--top-k", 1)
    from sparsesim.workflows import run_demo

    bar, advance = progress_bar(triplets, "training OASIS on the sample", show_progress(json_out),
                             loading="loading the embedded sample")
    with bar:
        stage = (lambda text: advance(0, None, stage=text)) if advance is not None else None
        report = run_demo(n_triplets=triplets, seed=seed, top_k=top_k, progress=advance, stage=stage)
    if json_out:
        emit(report)
        return
    echo_line(f"embedded sample: {report['n_documents']} 20 Newsgroups documents, {report['n_features']} "
               f"TF-IDF features, {report['n_classes']} groups; {report['n_train']} train / {report['n_test']} test")
    echo_line(f"OASIS: {report['n_triplets']} triplets in {report['train_seconds']:.1f} s")
    echo_line(f"{'similarity':<15}{'MAP %':>8}{'AP@10 %':>10}{'mAP@10 %':>10}{'fit s':>8}{'model KiB':>11}")
    for name, row in report["scores"].items():
        echo_line(f"{name:<15}{100 * row['map']:>8.2f}{100 * row['ap@10']:>10.2f}{100 * row['map@10']:>10.2f}"
                  f"{row['fit_seconds']:>8.1f}{row['model_bytes'] / 1024:>11,.0f}")
    echo_line(f"best MAP on this split: {report['best']} ({report['n_train']} training documents of the classes "
              "queried; larger corpora and unseen classes: docs/quality.md)")
    q = report["query"]
    echo_line(f"\ntop-{top_k} neighbours of test document {q['id']} [{q['group']}] \"{q['title']}\":")
    for name in ("oasis", "cosine"):
        echo_line(f"  {name}:")
        for hit in report["neighbours"][name]:
            mark = "+" if hit["group"] == q["group"] else " "
            echo_line(f"   {mark} {hit['score']:7.3f}  [{hit['group']}] {hit['title'][:60]}")
