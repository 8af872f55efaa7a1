"""scripts/code_metrics.py reads two commits from git and prints the shape of each side by side."""


def test_the_table_names_both_sides(load_script):
    text = load_script("code_metrics").main(["--before", "HEAD", "--after", "HEAD"])
    rows = text.splitlines()
    assert rows[0] == "| | HEAD | HEAD |"
    for row in rows[2:]:
        _, name, before, after, _ = row.split("|")
        assert before == after and before.strip()  # the same commit measures the same
    assert any("longest function in layerfuse/extract/" in row for row in rows)

