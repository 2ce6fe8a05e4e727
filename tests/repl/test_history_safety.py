"""The REPL history is never written through a link planted by someone else
(issue 27, item 5): not at the history file's name, nor at the temporary name
readline's own trimming used ("<name>-<pid>.tmp")."""
import os


def test_history_link_is_not_written_through(make_repl, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    hist = tmp_path / "hist"
    os.symlink(victim, hist)
    r = make_repl(history=hist).start()
    assert "history not saved" in r.startup and "symbolic link" in r.startup
    r.run("planted = 1")
    r.close()
    assert victim.read_text() == "precious\n"
    assert os.path.islink(hist)


def test_history_trim_does_not_follow_a_planted_temporary_name(make_repl, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    hist = tmp_path / "hist"
    # over the size at which the REPL trims the file after an entry
    hist.write_text("".join(f"old_line_{i} = {i}\n" for i in range(20000)))
    r = make_repl(history=hist).start()
    os.symlink(victim, f"{hist}-{r.p.pid}.tmp")
    r.run("newest = 1")
    r.close()
    assert victim.read_text() == "precious\n"
    assert not os.path.islink(hist)
    lines = hist.read_text().splitlines()
    assert len(lines) <= 1000 and lines[-1] == "newest = 1"


def test_history_hard_link_is_refused(make_repl, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    hist = tmp_path / "hist"
    os.link(victim, hist)
    r = make_repl(history=hist).start()
    assert "history not saved" in r.startup
    r.run("planted = 1")
    r.close()
    assert victim.read_text() == "precious\n"
