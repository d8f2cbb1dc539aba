"""Who may see a stored Response, through the real daemon and the official openai package
(label model), and the request fields issue 31 fixed:

- ids: 1000 response ids are distinct 128-bit hex, share no long prefix, and none can be
  computed from another (the old splitmix64 ids could: from one id the next was found);
- owners: Responses stored with one API key (TCP, several named keys in api_key_file) or by
  one uid (the Unix socket; a child demoted to uid 65534 — root only, else skipped loudly)
  are 404 to every other identity for GET, DELETE and previous_response_id, with the very
  answer an unknown id gets, and work for their owner; a key rotated under the same name
  (SIGHUP) keeps its owner's Responses; a background Response likewise, for retrieve,
  cancel and delete, while it runs and once cancelled;
- fairness: a client flooding the store evicts only its own Responses;
- bounds: user and metadata past OpenAI's limits are a 400 naming them;
- NUL: "\\u0000" in a message, a prompt, a stop string and a Responses input works end to
  end (and counts as a token of its own); a tool_choice function name of the wrong type
  is reported as such;
- a failing getrandom is a clean 500 (test hook builds only).

Usage: test_daemon_owners.py INFERD   (run by the venv's python: $INFERD_PYTHON)
"""
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import Daemon, UnixHTTPConnection, serve_and_run, skip  # noqa: E402

try:
    import httpx
    import openai
except ImportError as e:  # pragma: no cover
    skip("openai/httpx missing (%s): run deploy/install-deps.sh" % e)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
MODEL = "SmolLM2-135M-Instruct.Q4_1"
SANITIZED = bool(os.environ.get("INFERD_TEST_SANITIZED"))
KEYS = {"alice": "sk-alice-0123456789", "bob": "sk-bob-0123456789",
        "carol": "sk-carol-0123456789", "dave": "sk-dave-0123456789"}
BARE = "sk-bare-0123456789"  # a key without a name: named by its line
ENTRIES = 8                  # --responses-store-entries
D = None  # the daemon, and C the openai client on its Unix socket (serve_and_run)
C = None
KEYFILE = None


def port():
    """The TCP port the daemon bound (--listen 127.0.0.1:0: its log names it)."""
    m = re.search(r"listening on 127\.0\.0\.1:(\d+)", open(D.logpath).read())
    assert m, D.logtext()
    return int(m.group(1))


def tcp_client(who, key=None):
    key = key or (BARE if who == "bare" else KEYS[who])
    return openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port(), api_key=key,
                         max_retries=0, http_client=httpx.Client(timeout=300))


def create(client, text="Say one word.", **kw):
    return client.responses.create(model=MODEL, input=text, max_output_tokens=2, temperature=0,
                                   **kw)


def err_of(fn, *args, **kw):
    """The openai error fn raises: (status, the error object {message, type, param, code})."""
    try:
        fn(*args, **kw)
    except openai.APIStatusError as e:
        return e.status_code, e.body
    raise AssertionError("%s succeeded" % fn)


def as_unknown(err, rid):
    """An error with rid replaced by a placeholder: another's id and a never-stored one must
    get the same answer."""
    return json.dumps(err, sort_keys=True).replace(rid, "ID")


def assert_foreign(client, rid, unknown):
    """client sees rid exactly as it sees the never-stored id `unknown`."""
    for op in (client.responses.retrieve, client.responses.delete):
        got, want = err_of(op, rid), err_of(op, unknown)
        assert got[0] == want[0] == 404, (got, want)
        assert as_unknown(got[1], rid) == as_unknown(want[1], unknown), (got, want)
    got = err_of(create, client, "And then?", previous_response_id=rid)
    want = err_of(create, client, "And then?", previous_response_id=unknown)
    assert got[0] == want[0] == 404 and got[1]["code"] == "previous_response_not_found", got
    assert as_unknown(got[1], rid) == as_unknown(want[1], unknown), (got, want)


# ---- ids ------------------------------------------------------------------------------------

def _unmix(x):
    """The inverse of splitmix64's output function (it is a bijection)."""
    m = (1 << 64) - 1
    x ^= x >> 31
    x ^= x >> 62
    x = (x * pow(0x94D049BB133111EB, -1, 1 << 64)) & m
    x ^= (x >> 27) ^ (x >> 54)
    x = (x * pow(0xBF58476D1CE4E5B9, -1, 1 << 64)) & m
    x ^= (x >> 30) ^ (x >> 60)
    return x


def _mix(z):
    m = (1 << 64) - 1
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def test_ids_random():
    n = 200 if SANITIZED else 1000

    def one(i):
        c = UnixHTTPConnection(D.sock, timeout=120)
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": "x", "max_tokens": 1}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        body = json.loads(r.read())
        c.close()
        assert r.status == 200, body
        return body["id"]
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        ids = list(ex.map(one, range(n)))
    for i in ids:
        assert re.fullmatch(r"cmpl-[0-9a-f]{32}", i), i
    hexes = sorted(i[5:] for i in ids)
    assert len(set(hexes)) == n
    # 48 bits in common by chance: about n^2 / 2^49, never in a test run
    for a, b in zip(hexes, hexes[1:]):
        assert a[:12] != b[:12], (a, b)
    # no id follows from another: the old ids were splitmix64 outputs of one state that
    # each id and default seed advanced, so one id's first half gave the state, and the
    # next ids were among the following outputs
    seq = [create(C, store=False).id for _ in range(4)]
    g = 0x9E3779B97F4A7C15
    s = _unmix(int(seq[0][5:21], 16))
    guesses = {"%016x" % _mix((s + k * g) & ((1 << 64) - 1)) for k in range(1, 64)}
    hits = [i for i in seq[1:] if i[5:21] in guesses or i[21:37] in guesses]
    assert not hits, "ids predicted from %s: %s" % (seq[0], hits)
    D.wait_idle()


def test_ids_fail_is_500():
    if os.environ.get("INFERD_TEST_HOOKS") != "1":
        print("SKIPPED (this case): the daemon was built without -DINFERD_TEST_HOOKS=ON",
              flush=True)
        return
    d = Daemon(INFERD, env={"INFERD_TEST_IDS_FAIL": "1"})
    try:
        code, body = d.request("POST", "/v1/chat/completions",
                               {"messages": [{"role": "user", "content": "hi"}],
                                "max_tokens": 2})
        err = json.loads(body)["error"]
        assert code == 500 and "random" in err["message"], (code, body)
        code, body = d.request("GET", "/health")
        assert code == 200, body
    finally:
        assert d.stop() == 0


# ---- owners ---------------------------------------------------------------------------------

def test_tcp_keys_own_their_responses():
    alice, bob, bare = tcp_client("alice"), tcp_client("bob"), tcp_client("bare")
    r = create(alice, "My secret word is PLUM. Say OK.")
    assert r.store is True
    unknown = "resp_" + "0" * 32
    for other in (bob, bare, C):  # another key, the unnamed key, a local user
        assert_foreign(other, r.id, unknown)
    # the owner's view is intact (the others' attempts changed nothing)
    got = alice.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text
    nxt = create(alice, "What is my secret word?", previous_response_id=r.id)
    assert nxt.previous_response_id == r.id
    # bare keys are identities too, owning what they store
    rb = create(bare)
    assert bare.responses.retrieve(rb.id).id == rb.id
    assert_foreign(alice, rb.id, unknown)
    assert alice.responses.delete(r.id) is None
    assert err_of(alice.responses.retrieve, r.id)[0] == 404
    # a key rotated under the same name (SIGHUP) keeps its owner's Responses
    with open(KEYFILE, "w") as f:
        f.write(keyfile_text(alice="sk-alice-rotated-42"))
    t0 = time.time()
    D.proc.send_signal(signal.SIGHUP)
    rotated = tcp_client("alice", "sk-alice-rotated-42")
    while True:
        try:
            assert rotated.responses.retrieve(nxt.id).id == nxt.id
            break
        except openai.AuthenticationError:
            assert time.time() - t0 < 10, "the reloaded key file was not taken"
            time.sleep(0.05)
    assert err_of(alice.responses.retrieve, nxt.id)[0] == 401  # the old key is gone
    with open(KEYFILE, "w") as f:
        f.write(keyfile_text())
    D.proc.send_signal(signal.SIGHUP)
    while True:
        try:
            alice.models.list()
            break
        except openai.AuthenticationError:
            assert time.time() - t0 < 20
            time.sleep(0.05)
    D.wait_idle()


def test_background_owned():
    """A background Response is its creator's while it runs and once it has ended: another
    key or a local user gets the never-stored id's 404 from retrieve, cancel and delete."""
    alice, bob = tcp_client("alice"), tcp_client("bob")
    unknown = "resp_" + "0" * 32
    r = alice.responses.create(model=MODEL, input="Tell a long story.", background=True,
                               max_output_tokens=400, extra_body={"ignore_eos": True})
    for other in (bob, C):
        assert_foreign(other, r.id, unknown)
        got, want = err_of(other.responses.cancel, r.id), err_of(other.responses.cancel, unknown)
        assert got[0] == want[0] == 404, (got, want)
        assert as_unknown(got[1], r.id) == as_unknown(want[1], unknown), (got, want)
    assert alice.responses.retrieve(r.id).status in ("queued", "in_progress")
    assert alice.responses.cancel(r.id).status == "cancelled"
    for other in (bob, C):
        assert err_of(other.responses.cancel, r.id)[0] == 404
        assert err_of(other.responses.retrieve, r.id)[0] == 404
    assert alice.responses.retrieve(r.id).status == "cancelled"
    D.wait_idle()


CHILD = r"""
import http.client, json, socket, sys
sock, theirs = sys.argv[1], sys.argv[2]
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(sock)
def call(method, path, body=None):
    c = C("localhost", timeout=120)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, json.loads(r.read())
out = {}
out["get"] = call("GET", "/v1/responses/" + theirs)
out["delete"] = call("DELETE", "/v1/responses/" + theirs)
out["continue"] = call("POST", "/v1/responses", {"input": "And?", "max_output_tokens": 2,
                                                   "previous_response_id": theirs})
unknown = "resp_" + "0" * 32
out["get_unknown"] = call("GET", "/v1/responses/" + unknown)
out["continue_unknown"] = call("POST", "/v1/responses", {
    "input": "And?", "max_output_tokens": 2, "previous_response_id": unknown})
code, mine = call("POST", "/v1/responses", {"input": "Hi", "max_output_tokens": 2})
out["mine"] = [code, mine.get("id")]
out["get_mine"] = call("GET", "/v1/responses/%s" % mine.get("id"))[0]
print(json.dumps(out))
"""


def _demote():
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def test_unix_uids_own_their_responses():
    if os.geteuid() != 0:
        print("SKIPPED (this case): not root, so no second uid to connect as (CI runs as "
              "root)", flush=True)
        return
    r = create(C, "My secret word is FIG. Say OK.")
    out = subprocess.run(["/usr/bin/python3", "-c", CHILD, D.sock, r.id], preexec_fn=_demote,
                         capture_output=True, text=True, timeout=300, cwd="/")
    assert out.returncode == 0, out.stderr
    o = json.loads(out.stdout)
    unknown = "resp_" + "0" * 32
    for op, ref in (("get", "get_unknown"), ("delete", "get_unknown"),
                    ("continue", "continue_unknown")):
        assert o[op][0] == 404, (op, o[op])
        assert as_unknown(o[op][1], r.id) == as_unknown(o[ref][1], unknown), (op, o)
    assert o["mine"][0] == 200 and o["get_mine"] == 200, o
    # and uid 65534's Response is not this uid's
    assert_foreign(C, o["mine"][1], unknown)
    assert C.responses.retrieve(r.id).id == r.id
    D.wait_idle()


def test_flood_evicts_only_the_flooder():
    victim, flooder = tcp_client("alice"), C  # a key's client, a local user
    kept = create(victim, "Remember KIWI.")
    flood = [create(flooder, "Flood %d." % i).id for i in range(3 * ENTRIES)]
    assert victim.responses.retrieve(kept.id).id == kept.id
    assert flooder.responses.retrieve(flood[-1]).id == flood[-1]
    assert err_of(flooder.responses.retrieve, flood[0])[0] == 404  # its own oldest went
    assert create(victim, "What did I ask?", previous_response_id=kept.id).output_text
    D.wait_idle()


# ---- request fields ---------------------------------------------------------------------------

def test_user_and_metadata_bounded():
    cases = [({"user": "u" * 257}, "user", "string_above_max_length"),
             ({"user": "u" * 3_500_000}, "user", "string_above_max_length"),
             ({"metadata": {"k%d" % i: "v" for i in range(17)}}, "metadata",
              "object_above_max_properties"),
             ({"metadata": {"k" * 65: "v"}}, "metadata", "string_above_max_length"),
             ({"metadata": {"k": "v" * 513}}, "metadata.k", "string_above_max_length"),
             ({"metadata": {"k": 1}}, "metadata.k", "invalid_type")]
    for extra, param, code in cases:
        st, err = err_of(C.responses.create, model=MODEL, input="x", max_output_tokens=1, **extra)
        assert st == 400 and err["param"] == param and err["code"] == code, (param, st, err)
    ok = C.responses.create(model=MODEL, input="x", max_output_tokens=1, user="u" * 256,
                            metadata={"k%d" % i: "é" * 512 for i in range(16)})
    assert ok.user == "u" * 256 and len(ok.metadata) == 16
    assert C.responses.retrieve(ok.id).metadata == ok.metadata
    D.wait_idle()


def test_nul_end_to_end():
    nul = C.chat.completions.create(model=MODEL, max_tokens=4, temperature=0, messages=[
        {"role": "system", "content": "Be\x00brief."},
        {"role": "user", "content": [{"type": "text", "text": "Say\x00hi"}]}],
        stop=["\x00never"])
    assert nul.choices[0].message.content is not None
    # the NUL is a token of the prompt, not the end of it: more than the texts cut there
    cut = C.chat.completions.create(model=MODEL, max_tokens=4, temperature=0, messages=[
        {"role": "system", "content": "Be"}, {"role": "user", "content": "Say"}])
    assert nul.usage.prompt_tokens > cut.usage.prompt_tokens + 2, (nul.usage, cut.usage)
    code, tok = D.request("POST", "/tokenize", {"prompt": "a\x00b"})
    assert code == 200 and json.loads(tok)["count"] >= 3, tok
    cmpl = C.completions.create(model=MODEL, prompt="a\x00b", max_tokens=2, temperature=0)
    assert cmpl.usage.prompt_tokens >= 3, cmpl.usage
    r = C.responses.create(model=MODEL, input="Say\x00hi", instructions="Be\x00brief.",
                           max_output_tokens=2, temperature=0)
    assert r.instructions == "Be\x00brief."
    nxt = C.responses.create(model=MODEL, input="Again\x00.", previous_response_id=r.id,
                             max_output_tokens=2)
    assert nxt.usage.input_tokens > r.usage.input_tokens
    D.wait_idle()


def test_tool_choice_name_type():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    st, err = err_of(C.chat.completions.create, model=MODEL, max_tokens=2, tools=tools,
                     messages=[{"role": "user", "content": "x"}],
                     tool_choice={"type": "function", "function": {"name": 5}})
    assert st == 400 and err["param"] == "tool_choice.function.name", err
    assert err["code"] == "invalid_type" and "an integer" in err["message"], err


def keyfile_text(alice=KEYS["alice"]):
    keys = dict(KEYS, alice=alice)
    return ("# test keys\n" + "".join("%s %s\n" % kv for kv in keys.items()) + "\n" + BARE
            + "\n")


def main():
    global KEYFILE
    tmp = tempfile.mkdtemp(prefix="inferd-owners-")
    os.chmod(tmp, 0o711)  # uid 65534 reaches the socket (test_unix_uids_own_their_responses)
    KEYFILE = os.path.join(tmp, "keys")
    with open(KEYFILE, "w") as f:
        f.write(keyfile_text())
    try:
        return serve_and_run(globals(), INFERD, tmpdir=tmp, args=[
            "--listen", "127.0.0.1:0", "--api-key-file", KEYFILE, "--socket-mode", "0666",
            "--responses-store-entries", str(ENTRIES)])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
