#!/usr/bin/env bash
# rdmaplanectl answers whatever the clients hold, and shows each asker only
# what the policy allows (docs/operations.md, "Who may see what"). One
# daemon, small per-user limits, and users that exist only as numbers
# (setpriv runs each command as them):
#   1. User A (uid 4201) takes everything it is allowed (limit_holder):
#      sessions, arenas, registrations and connection ends, each until the
#      daemon refuses the next one with the limit's flag in the reason.
#      Then `rdmaplanectl status`, `clients`, `connections`,
#      `registrations` and `counters`, run as A, in text and JSON, all
#      answer, and show A's own sessions; a new client of A is still
#      refused.
#   2. User B (uid 4202) takes every limit too. Each of A and B, asking,
#      sees exactly its own clients, connections and registrations, none of
#      the other's (text and JSON), a line saying how many were left out,
#      and "view": "own" in JSON with hidden_* counting the other's;
#      status still shows the daemon's totals.
#   3. B with the admin group (4300) as a supplementary group, C (uid 4203)
#      with it as its primary group, and root see both users' rows.
#   4. Who may connect at all: uid 4204, in no list, is refused with the
#      policy's reason; with the allowed group 4400 as its primary group, or
#      as a supplementary one, it is let in.
#
#   admin_access_test.sh E2E_LIB RDMAPLANED RDMAPLANECTL LIMIT_HOLDER
set -euo pipefail

if [[ $# -ne 4 ]]; then
  echo "usage: $0 E2E_LIB RDMAPLANED RDMAPLANECTL LIMIT_HOLDER" >&2
  exit 2
fi
E2E_NAME=admin_access_test
# shellcheck source=tests/e2e/e2e_lib.sh
source "$1"
daemon_bin="$2"
ctl_src="$3"
holder_src="$4"
for bin in "$daemon_bin" "$ctl_src" "$holder_src"; do
  [[ -x $bin ]] || e2e_fail "no executable at $bin"
done
if [[ $(id -u) -ne 0 ]]; then
  e2e_skip "needs root to run commands as other users"
fi
setpriv="$(command -v setpriv || true)"
[[ -n $setpriv ]] || e2e_fail "setpriv (util-linux) is missing"

e2e_install_traps
e2e_make_tmp
# Other users reach the socket and the copies of the tools through it.
chmod 0755 "$E2E_TMP"
e2e_log "working in $E2E_TMP"
uid_a=4201 uid_b=4202 uid_c=4203 uid_d=4204 admin_gid=4300 allowed_gid=4400
# The runfiles usually sit under a private home folder: copies the other
# users can run (both binaries link the project's libraries statically).
install -m 0755 "$ctl_src" "$E2E_TMP/rdmaplanectl"
install -m 0755 "$holder_src" "$E2E_TMP/limit_holder"
ctl="$E2E_TMP/rdmaplanectl"
sock="$E2E_TMP/d.sock"

e2e_start_daemon d "$sock" "rdp-admin-$$" \
  "$daemon_bin" --socket="$sock" --file_prefix="rdp-admin-$$" \
  --allow_uids="$uid_a,$uid_b,$uid_c" --allow_gids="$allowed_gid" --admin_gids="$admin_gid" \
  --max_sessions_per_user=3 --max_arenas_per_user=5 \
  --max_registrations_per_user=4 --max_connections_per_user=4 \
  || e2e_fail "the daemon did not start"

# as UID GID [GROUPS] -- COMMAND...: COMMAND as that user, without root's
# groups (GROUPS: comma-separated supplementary gids).
as() {
  local uid="$1" gid="$2" groups=""
  shift 2
  if [[ $1 != -- ]]; then
    groups="$1"
    shift
  fi
  shift
  if [[ -n $groups ]]; then
    timeout --kill-after=5 30 "$setpriv" --reuid="$uid" --regid="$gid" \
      --groups="$groups" -- "$@"
  else
    timeout --kill-after=5 30 "$setpriv" --reuid="$uid" --regid="$gid" \
      --clear-groups -- "$@"
  fi
}

# ask LABEL UID GID GROUPS ARGS...: rdmaplanectl ARGS as that user into
# E2E_TMP/LABEL.out; fails the test when it does not answer.
ask() {
  local label="$1" uid="$2" gid="$3" groups="$4" status=0
  shift 4
  local out="$E2E_TMP/$label.out"
  if [[ -n $groups ]]; then
    as "$uid" "$gid" "$groups" -- "$ctl" --socket="$sock" --timeout=5s "$@" >"$out" 2>&1 || status=$?
  else
    as "$uid" "$gid" -- "$ctl" --socket="$sock" --timeout=5s "$@" >"$out" 2>&1 || status=$?
  fi
  if [[ $status -ne 0 ]]; then
    sed 's/^/    /' "$out"
    e2e_fail "$label: rdmaplanectl $* as uid $uid exited with status $status"
  fi
}

# json_field FILE EXPR: a Python expression over the JSON in FILE (as j).
json_field() {
  python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

expect_eq() {
  [[ $1 == "$2" ]] || e2e_fail "$3: got '$1', want '$2'"
  e2e_log "ok: $3 ($1)"
}

# hold NAME UID SERVICE: limit_holder as user UID (its own group), in the
# background until the test closes its input (HOLD_FD[NAME]); waits until it
# holds every limit and checks that each refusal named its flag. Its hang
# bound is the test's, not `as`'s 30 s: it lives through the whole test.
declare -A HOLD_FD=() HOLD_PID=()
hold() {
  local name="$1" uid="$2" service="$3" i fd
  local fifo="$E2E_TMP/hold-$name" out="$E2E_TMP/holder-$name.out"
  mkfifo "$fifo"
  chmod 0666 "$fifo"
  # Without the other holders' input ends, which it would keep open.
  (
    for fd in "${HOLD_FD[@]}"; do exec {fd}>&-; done
    exec timeout --kill-after=5 600 "$setpriv" --reuid="$uid" --regid="$uid" --clear-groups -- \
      "$E2E_TMP/limit_holder" "$sock" "$service"
  ) <"$fifo" >"$out" 2>&1 &
  HOLD_PID[$name]=$!
  E2E_HELPER_PIDS+=("${HOLD_PID[$name]}")
  # Keeps the holder's input open until the test lets it go.
  exec {fd}>"$fifo"
  HOLD_FD[$name]=$fd
  for ((i = 0; i < 300; i++)); do
    grep -q '^holding$' "$out" && break
    if ! kill -0 "${HOLD_PID[$name]}" 2>/dev/null; then
      sed 's/^/    /' "$out"
      e2e_fail "holder $name exited before holding everything"
    fi
    sleep 0.1
  done
  grep -q '^holding$' "$out" || e2e_fail "holder $name did not take every limit within 30 s: $(cat "$out")"
  sed "s/^/    holder $name: /" "$out"
  for flag in max_sessions_per_user max_arenas_per_user max_registrations_per_user max_connections_per_user; do
    grep -q -- "refused -[0-9]* --$flag reached" "$out" || e2e_fail "holder $name: no refusal names --$flag"
  done
  e2e_log "ok: user $uid is at every limit"
}
# release NAME: closes the holder's input; it closes its sessions and exits.
release() {
  local name="$1" fd="${HOLD_FD[$1]}"
  exec {fd}>&-
  wait "${HOLD_PID[$name]}" || e2e_fail "holder $name failed: $(cat "$E2E_TMP/holder-$name.out")"
}

# --- 1. A user at every limit ------------------------------------------------
hold a "$uid_a" held-a

for topic in status clients connections registrations counters; do
  ask "a-$topic" "$uid_a" "$uid_a" "" "$topic"
  ask "a-$topic-json" "$uid_a" "$uid_a" "" --json "$topic"
done
e2e_log "user $uid_a at every limit asks: rdmaplanectl status"
sed 's/^/    /' "$E2E_TMP/a-status.out"
expect_eq "$(json_field "$E2E_TMP/a-clients-json.out" 'len(j)')" 3 "A sees its 3 sessions"
expect_eq "$(json_field "$E2E_TMP/a-clients-json.out" 'sorted({c["uid"] for c in j})')" "[$uid_a]" "A's rows are A's"
expect_eq "$(json_field "$E2E_TMP/a-connections-json.out" 'len(j)')" 4 "A sees its 4 connection ends"
expect_eq "$(json_field "$E2E_TMP/a-registrations-json.out" 'len(j)')" 4 "A sees its 4 registrations"
expect_eq "$(json_field "$E2E_TMP/a-status-json.out" 'j["view"]')" own "A's view"
expect_eq "$(json_field "$E2E_TMP/a-status-json.out" 'j["clients"]')" 3 "the daemon's clients"
# Still no room for a client of A.
status=0
as "$uid_a" "$uid_a" -- "$E2E_TMP/limit_holder" "$sock" other >"$E2E_TMP/extra.out" 2>&1 || status=$?
grep -q '^error open -14 .*--max_sessions_per_user' "$E2E_TMP/extra.out" \
  || e2e_fail "a 4th session of A was not refused by the limit: $(cat "$E2E_TMP/extra.out")"
e2e_log "ok: a new client of A is refused: $(cat "$E2E_TMP/extra.out")"

# --- 2. Two users, each sees only its own ----------------------------------
hold b "$uid_b" held-b
# sessions_of FILE: the session ids of a JSON clients list, sorted.
sessions_of() { json_field "$1" 'sorted(c["session_id"] for c in j)'; }
for who in a b; do
  if [[ $who == a ]]; then uid="$uid_a"; else uid="$uid_b"; fi
  for topic in status clients connections registrations; do
    ask "$who-2-$topic" "$uid" "$uid" "" "$topic"
    ask "$who-2-$topic-json" "$uid" "$uid" "" --json "$topic"
  done
done
for who in a b; do
  if [[ $who == a ]]; then uid="$uid_a" other=b; else uid="$uid_b" other=a; fi
  sed "s/^/    $who: /" "$E2E_TMP/$who-2-clients.out"
  expect_eq "$(json_field "$E2E_TMP/$who-2-clients-json.out" 'sorted({c["uid"] for c in j})')" "[$uid]" \
    "$who sees only its own clients"
  expect_eq "$(json_field "$E2E_TMP/$who-2-clients-json.out" 'len(j)')" 3 "$who sees its 3 sessions"
  own="$(sessions_of "$E2E_TMP/$who-2-clients-json.out")"
  expect_eq "$(json_field "$E2E_TMP/$who-2-connections-json.out" 'sorted({c["session_id"] for c in j} - set('"$own"'))')" \
    "[]" "$who's connection rows are of its own sessions"
  expect_eq "$(json_field "$E2E_TMP/$who-2-connections-json.out" 'len(j)')" 4 "$who sees its 4 connection ends"
  expect_eq "$(json_field "$E2E_TMP/$who-2-registrations-json.out" 'sorted({r["session_id"] for r in j} - set('"$own"'))')" \
    "[]" "$who's registration rows are of its own sessions"
  expect_eq "$(json_field "$E2E_TMP/$who-2-registrations-json.out" 'len(j)')" 4 "$who sees its 4 registrations"
  status_json="$E2E_TMP/$who-2-status-json.out"
  expect_eq "$(json_field "$status_json" 'j["view"]')" own "$who's view"
  expect_eq "$(json_field "$status_json" '(j["hidden_clients"], j["hidden_connections"], j["hidden_registrations"])')" \
    "(3, 4, 4)" "$who is told what of $other's was left out"
  expect_eq "$(json_field "$status_json" '(j["clients"], j["connections"], j["registrations"])')" \
    "(6, 8, 8)" "$who sees the daemon's totals"
  grep -q "^(3 clients of other users not shown" "$E2E_TMP/$who-2-clients.out" \
    || e2e_fail "$who's clients table does not say that 3 were left out"
  grep -q "^(4 connections of other users not shown" "$E2E_TMP/$who-2-connections.out" \
    || e2e_fail "$who's connections table does not say that 4 were left out"
  grep -q "^(4 registrations of other users not shown" "$E2E_TMP/$who-2-registrations.out" \
    || e2e_fail "$who's registrations table does not say that 4 were left out"
  grep -q "^clients .*6 (3 of other users, not shown)" "$E2E_TMP/$who-2-status.out" \
    || e2e_fail "$who's status does not say that 3 clients were left out: $(cat "$E2E_TMP/$who-2-status.out")"
  # The other user's sessions appear in none of the text tables.
  other_sessions="$(sessions_of "$E2E_TMP/$other-2-clients-json.out" | tr -d '[],')"
  for topic in clients connections registrations; do
    for sid in $other_sessions; do
      awk -v sid="$sid" -v t="$topic" 'NR > 1 && !/^\(/ && (t == "clients" ? $1 : $2) == sid { found = 1 } END { exit !found }' \
        "$E2E_TMP/$who-2-$topic.out" && e2e_fail "$who's $topic table shows session $sid of $other"
    done
  done
done
e2e_log "ok: A and B each see their own rows and nothing of the other's"

# --- 3. The admin group and root see everything ------------------------------
ask b-admin-json "$uid_b" "$uid_b" "$admin_gid" --json clients
ask c-admin-json "$uid_c" "$admin_gid" "" --json clients
ask c-admin-status "$uid_c" "$admin_gid" "" --json status
ask c-admin-connections "$uid_c" "$admin_gid" "" --json connections
ask root-json 0 0 "" --json clients
for who in b-admin c-admin root; do
  expect_eq "$(json_field "$E2E_TMP/$who-json.out" 'sorted(c["uid"] for c in j)')" \
    "[$uid_a, $uid_a, $uid_a, $uid_b, $uid_b, $uid_b]" "$who sees both users' sessions"
done
expect_eq "$(json_field "$E2E_TMP/c-admin-status.out" 'j["view"]')" all "the admin group's view"
expect_eq "$(json_field "$E2E_TMP/c-admin-status.out" 'j["hidden_clients"]')" 0 "nothing hidden from the admin group"
expect_eq "$(json_field "$E2E_TMP/c-admin-connections.out" 'len(j)')" 8 "the admin group sees every connection end"

# --- 4. Who may connect ------------------------------------------------------
status=0
as "$uid_d" "$uid_d" -- "$ctl" --socket="$sock" --timeout=5s status >"$E2E_TMP/d-refused.out" 2>&1 || status=$?
[[ $status -eq 1 ]] && grep -q "uid $uid_d is not allowed by this daemon's policy" "$E2E_TMP/d-refused.out" \
  || e2e_fail "uid $uid_d in no list was not refused with the policy's reason (exit $status): $(cat "$E2E_TMP/d-refused.out")"
e2e_log "ok: uid $uid_d in no list is refused: $(head -n 1 "$E2E_TMP/d-refused.out")"
ask d-primary "$uid_d" "$allowed_gid" "" --json status
expect_eq "$(json_field "$E2E_TMP/d-primary.out" 'j["view"]')" own "uid $uid_d with --allow_gids as its primary group is let in"
ask d-supplementary "$uid_d" "$uid_d" "$allowed_gid" --json status
expect_eq "$(json_field "$E2E_TMP/d-supplementary.out" 'j["view"]')" own \
  "uid $uid_d with --allow_gids as a supplementary group is let in"

# Let the holders go; their sessions are reclaimed.
release a
release b
for ((i = 0; i < 100; i++)); do
  ask root-after 0 0 "" --json status
  [[ $(json_field "$E2E_TMP/root-after.out" 'j["clients"]') == 0 ]] && break
  sleep 0.1
done
expect_eq "$(json_field "$E2E_TMP/root-after.out" 'j["clients"]')" 0 "every session of A and B is given back"

e2e_stop_daemon d || e2e_fail "the daemon did not stop cleanly"
e2e_log "PASS"
