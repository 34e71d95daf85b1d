from pathlib import Path

from lesson_factory import QUESTIONS, write_lesson

from pytest_hpccourse import cli


def test_list_shows_lessons_and_kinds(tmp_path: Path, capsys, monkeypatch):
    write_lesson(tmp_path, "modules/00-demo/01-add", "demo-01", requires='["numpy"]')
    write_lesson(tmp_path, "modules/00-demo/02-bad", "demo-02", questions=QUESTIONS.replace('kind = "choice"',
                                                                                            'kind = "essay"'))
    monkeypatch.chdir(tmp_path)
    code = cli.main(["list", "modules"])
    out = capsys.readouterr().out
    assert code == 1
    assert "demo-01" in out and "向量加法" in out and "numpy" in out and "numeric choice formula" in out
    assert "demo-02" in out and "INVALID" in out and "questions[1].kind: must be one of" in out
    assert "2 lesson(s), 1 INVALID" in out


def test_list_of_nothing(tmp_path: Path, capsys):
    assert cli.main(["list", str(tmp_path)]) == 0
    assert "0 lesson(s)" in capsys.readouterr().out


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "release" in capsys.readouterr().out
