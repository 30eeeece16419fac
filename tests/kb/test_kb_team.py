"""A team KB on a real PostgreSQL server: credentials only from the environment or a password
file, a read-only role that ranks, and attempts kept locally while the server is down and sent
exactly once when it is back."""

from __future__ import annotations

import msgspec
import pytest

from kernelblaster.cli import main
from kernelblaster.kb import outbox, team
from kernelblaster.kb.database import KBReadOnly
from kernelblaster.kb.fallback import open_or_fallback
from kernelblaster.kb.schema import KBError
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.kb.team import TeamKnowledgeBase
from kernelblaster.settings import SettingsError, load_settings
from tests.kb.kb_helpers import make_attempt, refolded_counts, stored_counts
from tests.postgres_server import PASSWORD_ROLE, READER_ROLE, PostgresServer

SECRET = "s3cret-Passw0rd-kb"


@pytest.fixture
def team_url(postgres_server) -> str:
    return postgres_server.url(postgres_server.create_database("team"))


# --- credentials -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://kb_admin:{SECRET}@127.0.0.1:5432/team",
        f"postgres://127.0.0.1/team?user=kb_admin&password={SECRET}",
        f"postgresql://kb@127.0.0.1/team?sslpassword={SECRET}",
    ],
)
def test_a_url_with_a_password_is_refused_before_anything_connects(url, capsys, tmp_path):
    with pytest.raises(KBError, match=r"contains a password.*PGPASSWORD") as refused:
        KnowledgeBase.open(url)
    assert SECRET not in str(refused.value)
    with pytest.raises(SettingsError, match=r"kb_path: .*contains a password") as in_settings:
        load_settings(tmp_path, environ={"KERNELBLASTER_KB": url})
    assert SECRET not in str(in_settings.value)
    assert main(["kb", "--kb", url, "stats"]) == 1
    out, err = capsys.readouterr()
    assert "contains a password" in err and SECRET not in out + err


def test_the_password_comes_from_pgpassword_or_a_password_file(
    postgres_server, team_url, monkeypatch, tmp_path
):
    postgres_server.admin(f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{SECRET}' SUPERUSER")
    url = team_url.replace("kb_admin@", f"{PASSWORD_ROLE}@")
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-such-pgpass"))
    with pytest.raises(KBError, match=r"refused the login.*PGPASSWORD") as refused:
        KnowledgeBase.open(url)
    assert SECRET not in str(refused.value)

    monkeypatch.setenv("PGPASSWORD", SECRET)
    with KnowledgeBase.open(url) as kb:
        assert kb.record(make_attempt())
    monkeypatch.delenv("PGPASSWORD")
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{postgres_server.port}:*:{PASSWORD_ROLE}:{SECRET}\n")
    passfile.chmod(0o600)  # libpq ignores a password file others can read
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    with KnowledgeBase.open(url) as kb:
        assert len(kb.attempts()) == 1
        assert SECRET not in msgspec.json.encode(kb.summary()).decode()


# --- a read-only role ------------------------------------------------------------------------


def _grant_reader(server: PostgresServer, url: str) -> str:
    database = url.rsplit("/", 1)[1]
    if not server.admin(f"SELECT 1 FROM pg_roles WHERE rolname = '{READER_ROLE}'"):
        server.admin(f"CREATE ROLE {READER_ROLE} LOGIN")
    server.admin(f"GRANT USAGE ON SCHEMA public TO {READER_ROLE}", database)
    server.admin(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {READER_ROLE}", database)
    return url.replace("kb_admin@", f"{READER_ROLE}@")


def test_a_read_only_role_ranks_but_does_not_record(postgres_server, team_url, tmp_path):
    with KnowledgeBase.open(team_url) as writer:  # creates the schema
        for outcome in ("success", "compile_error", "success"):
            writer.record(make_attempt(outcome=outcome))
        expected = writer.rank("sm_90", "memory.dram")
    reader_url = _grant_reader(postgres_server, team_url)
    with KnowledgeBase.open(reader_url) as reader:
        assert reader.rank("sm_90", "memory.dram") == expected
        assert len(reader.attempts()) == 3 and reader.summary().attempts == 3
        with pytest.raises(KBReadOnly, match="read-only for this role: it can rank"):
            reader.record(make_attempt())
    # The loop and the server keep going with a read-only role: they learn locally.
    kb, message = TeamKnowledgeBase.connect(reader_url, tmp_path / "personal.sqlite3")
    with kb:
        assert message is None and kb.rank("sm_90", "memory.dram") == expected
        assert kb.record(make_attempt(arch="sm_80"))
        assert kb.waiting() == 0  # not queued for a server that would refuse it
        assert [a.arch for a in kb.local.attempts()] == ["sm_80"]
    with KnowledgeBase.open(team_url) as writer:
        assert len(writer.attempts()) == 3


def test_a_read_only_role_cannot_create_the_schema(postgres_server, team_url):
    reader_url = _grant_reader(postgres_server, team_url)
    postgres_server.admin("REVOKE CREATE ON SCHEMA public FROM PUBLIC", team_url.rsplit("/")[-1])

    with pytest.raises(KBError, match="schema version 0 and this role may only read it"):
        KnowledgeBase.open(reader_url)


# --- the server goes away and comes back -----------------------------------------------------


@pytest.fixture
def own_server(postgres_server):
    """A server of this test's own, to stop and start (the session's server stays up)."""
    server = PostgresServer(postgres_server.bindir).init()
    server.start()
    yield server
    server.destroy()


def test_attempts_made_while_the_server_is_down_are_sent_once_when_it_is_back(
    own_server, tmp_path, monkeypatch
):
    monkeypatch.setattr(team, "RETRY_S", 0.0)  # try the server on every call
    url = own_server.url(own_server.create_database("team"))
    kb, message = TeamKnowledgeBase.connect(url, tmp_path / "personal.sqlite3")
    with kb:
        assert message is None
        online = make_attempt(measured_speedup=1.5)
        assert kb.record(online)

        own_server.stop()
        offline = [
            make_attempt(measured_speedup=1.2),
            make_attempt(outcome="compile_error"),
            make_attempt(technique="vectorized_loads", measured_speedup=1.1),
        ]
        assert all(kb.record(a) for a in offline)
        kb.add_note("sm_90", "memory.dram", "coalesce_global_access", "learned offline")
        kb.set_prior("sm_90", "memory.dram", "kernel_fusion", 1.3, "fused kernels spilled")
        assert kb.problem is not None and "can't be reached" in kb.problem
        assert {a.id for a in kb.attempts()} == {a.id for a in offline}  # the local KB's view
        assert kb.rank("sm_90", "memory.dram")[0].technique  # ranking goes on
        assert kb.waiting() == 5

        own_server.start()
        assert kb.waiting() == 0  # sent as soon as the server answered
        assert kb.problem is None
        assert {a.id for a in kb.attempts()} == {a.id for a in [online, *offline]}
        assert stored_counts(kb) == refolded_counts(kb)
        entry = kb.entry("sm_90", "memory.dram", "coalesce_global_access")
        assert (entry.attempts, entry.successes, entry.failures) == (3, 2, 1)
        assert entry.notes == ["learned offline"]
        assert kb.entry("sm_90", "memory.dram", "kernel_fusion").prior_speedup == 1.3

        # A send cut short after the server committed, before the outbox was cleared: the
        # same changes are sent again, and nothing is counted twice.
        with kb.local.write_transaction() as conn:
            outbox.push(conn, url, offline)
        assert kb.waiting() == 0
        assert len(kb.attempts()) == 4
        assert kb.entry("sm_90", "memory.dram", "coalesce_global_access").attempts == 3
        assert stored_counts(kb) == refolded_counts(kb)


def test_a_connection_lost_mid_call_is_retried_at_once(own_server, tmp_path):
    url = own_server.url(own_server.create_database("team"))
    kb, _ = TeamKnowledgeBase.connect(url, tmp_path / "personal.sqlite3")
    with kb:
        kb.record(make_attempt())
        # The server drops our session (an administrator, a failover, a restart).
        own_server.admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'kernelblaster'"
        )
        assert kb.record(make_attempt())
        assert kb.waiting() == 0 and len(kb.attempts()) == 2


def test_a_server_down_at_start_is_said_and_the_outbox_waits(
    own_server, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the personal KB
    url = own_server.url(own_server.create_database("team"))
    own_server.stop()
    kb, message = open_or_fallback(url)
    with kb:
        assert isinstance(kb, TeamKnowledgeBase)
        assert "can't be reached" in message and "sent when it is back" in message
        kb.record(make_attempt())
        assert kb.waiting() == 1
    assert main(["kb", "--kb", url, "sync"]) == 1
    assert "1 changes still wait" in capsys.readouterr().err
    own_server.start()
    assert main(["kb", "--kb", url, "sync"]) == 0
    assert "sent everything waiting" in capsys.readouterr().out
    with KnowledgeBase.open(url) as server_side:
        assert len(server_side.attempts()) == 1


def test_a_proposal_and_a_decision_made_while_the_server_is_down_reach_it_when_it_is_back(
    own_server, tmp_path, monkeypatch
):
    from kernelblaster.kb.proposals import decide, proposal_views
    from tests.kb.test_kb_proposals import proposal

    monkeypatch.setattr(team, "RETRY_S", 0.0)
    url = own_server.url(own_server.create_database("team"))
    kb, _ = TeamKnowledgeBase.connect(url, tmp_path / "personal.sqlite3")
    with kb:
        own_server.stop()
        assert kb.propose(proposal())
        decide(kb, "streaming_store_hints", "retired", "fragile")
        assert kb.waiting() == 1  # one outbox row per proposal: its latest decision replaces it
        own_server.start()
        assert kb.waiting() == 0
        (view,) = proposal_views(kb)  # read from the server
        assert (view.technique, view.status, view.kernel) == (
            "streaming_store_hints",
            "retired",
            "relu_naive",
        )
        assert kb.technique("streaming_store_hints") is not None
