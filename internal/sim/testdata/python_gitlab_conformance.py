#!/usr/bin/python3
"""Drive bindery's simulated GitLab with python-gitlab, a client we did not write.

Every endpoint bindery uses, in the order a batch uses them, with the status codes and fields
GitLab's own source gives them (docs: ../../docs/gitlab.md). Run by sim/pygitlab_test.go:

    python_gitlab_conformance.py <base URL> <pipeline source> [<merge method>]

Tokens come from the environment: BOT_TOKEN, REVIEWER1_TOKEN, REVIEWER2_TOKEN. Exit status 0
when every check held; each failed check is printed.
"""

import json
import os
import sys
import time

import gitlab

URL, SOURCE = sys.argv[1], sys.argv[2]
METHOD = sys.argv[3] if len(sys.argv) > 3 else "rebase_merge"
PROJECT = "grp/sub.proj"
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what, flush=True)


def status_of(gl, verb, path, **kw):
    """The HTTP status of a raw call, for the answers whose code matters."""
    try:
        return gl.http_request(verb, path, **kw).status_code
    except gitlab.exceptions.GitlabHttpError as e:
        return e.response_code
    except gitlab.exceptions.GitlabAuthenticationError as e:
        return e.response_code


def client(token):
    gl = gitlab.Gitlab(URL, private_token=token, retry_transient_errors=False)
    gl.auth()
    return gl


bot = client(os.environ["BOT_TOKEN"])
check(bot.user.username == "bindery-bot", f"current user {bot.user.username}")

# The project, not lazy: GET /projects/:id is the first call python-gitlab and glab make.
project = bot.projects.get(PROJECT)
check(project.path_with_namespace == PROJECT, f"project {project.path_with_namespace}")
check(project.default_branch == "main", f"default branch {project.default_branch}")
check(project.merge_method == METHOD, f"merge method {project.merge_method}")
base = f"/projects/{project.id}"

# One commit with several actions, creating the branch from main.
commit = project.commits.create({
    "branch": "bindery/batch-1", "start_branch": "main", "commit_message": "bindery: batch 1 (2 changes)",
    "actions": [
        {"action": "create", "file_path": "bindings/alice.yaml", "content": "operationId: op-a\n"},
        {"action": "create", "file_path": "bindings/bob.yaml", "content": "operationId: op-b\n"},
        {"action": "update", "file_path": "README.md", "content": "# sub.proj\nbindings live here\n"},
    ],
})
check(len(commit.parent_ids) == 1, f"commit parents {commit.parent_ids}")
check(commit.stats["additions"] >= 3, f"commit stats {commit.stats}")
again = project.commits.get(commit.id)
check(again.parent_ids == commit.parent_ids, "GET commit parents")
try:
    project.commits.create({"branch": "bindery/batch-1", "commit_message": "again", "actions": [
        {"action": "create", "file_path": "bindings/alice.yaml", "content": "x\n"}]})
    check(False, "creating an existing file was accepted")
except gitlab.exceptions.GitlabCreateError as e:
    check(e.response_code == 400, f"creating an existing file: {e.response_code}")

# Branches on branches, as a merge train builds its cars: a branch at a commit id, a commit on
# another branch's commit, remade elsewhere with force; their merge base.
car0 = project.branches.create({"branch": "bindery/car-0", "ref": commit.id})
check(car0.commit["id"] == commit.id, f"branch at a commit: {car0.commit['id']}")
car = project.commits.create({"branch": "bindery/car-2", "start_sha": commit.id, "commit_message": "car 2", "actions": [
    {"action": "create", "file_path": "bindings/dave.yaml", "content": "operationId: op-d\n"}]})
check(car.parent_ids == [commit.id], f"car on a commit: parents {car.parent_ids}")
mb = project.repository_merge_base(["bindery/car-2", "main"])
check(mb["id"] == commit.parent_ids[0] and "stats" not in mb, f"merge base with main {mb}")
mb = project.repository_merge_base([commit.id, "bindery/car-2"])
check(mb["id"] == commit.id, f"merge base of a commit and a branch built on it {mb['id']}")
try:
    project.repository_merge_base(["main", "nope"])
    check(False, "a merge base of an unknown ref was answered")
except gitlab.exceptions.GitlabGetError as e:
    check(e.response_code == 400 and "Could not find ref: nope" in str(e.error_message), f"unknown ref: {e.response_code} {e.error_message}")
try:
    project.commits.create({"branch": "bindery/car-2", "start_branch": "main", "commit_message": "again", "actions": [
        {"action": "create", "file_path": "bindings/dave.yaml", "content": "operationId: op-d\n"}]})
    check(False, "remaking a branch elsewhere without force was accepted")
except gitlab.exceptions.GitlabCreateError as e:
    check(e.response_code == 400 and "already exists" in str(e.error_message), f"remake without force: {e.response_code} {e.error_message}")
remade = project.commits.create({"branch": "bindery/car-2", "start_branch": "main", "force": True, "commit_message": "car 2 again",
                                 "actions": [{"action": "create", "file_path": "bindings/dave.yaml", "content": "operationId: op-d\n"}]})
check(remade.parent_ids == commit.parent_ids, f"car remade on main: parents {remade.parent_ids}")

# The MR.
mr = project.mergerequests.create({"source_branch": "bindery/batch-1", "target_branch": "main",
                                   "title": "bindery: batch 1", "remove_source_branch": True})
check(mr.state == "opened" and mr.sha == commit.id, f"new MR {mr.state} {mr.sha}")
try:
    project.mergerequests.create({"source_branch": "bindery/batch-1", "target_branch": "main", "title": "dup"})
    check(False, "a second MR for the branch was accepted")
except gitlab.exceptions.GitlabCreateError as e:
    check(e.response_code == 409 and f"!{mr.iid}" in str(e.error_message), f"duplicate MR: {e.response_code} {e.error_message}")


def read_mr():
    """The MR as bindery reads it, once GitLab has computed its mergeability."""
    for _ in range(20):
        m = project.mergerequests.get(mr.iid, include_rebase_in_progress=True)
        if m.detailed_merge_status not in ("checking", "unchecked", "preparing", "approvals_syncing"):
            return m
    return m


m = read_mr()
check(m.rebase_in_progress is False, f"rebase_in_progress {getattr(m, 'rebase_in_progress', None)}")
check(m.merge_status in ("can_be_merged", "cannot_be_merged", "unchecked", "checking"), f"merge_status {m.merge_status}")
check(isinstance(m.has_conflicts, bool) and m.has_conflicts is False, f"has_conflicts {m.has_conflicts}")
check(m.blocking_discussions_resolved is True, "blocking_discussions_resolved")

# Pipelines: the MR's own, found the way GitLab matches them, for the pipeline source in force.
hp = m.head_pipeline
check(hp is not None, "head_pipeline")
pipelines = m.pipelines.list()
check(len(pipelines) >= 1, f"MR pipelines {pipelines}")
if SOURCE == "merged_result":
    check(hp["sha"] != m.sha and hp["ref"] == f"refs/merge-requests/{m.iid}/merge", f"merged-results pipeline {hp}")
    parents = project.commits.get(hp["sha"]).parent_ids
    check(parents[-1] == m.sha, f"merge commit parents {parents} (head {m.sha})")
elif SOURCE == "push":
    check(hp["source"] == "push" and hp["ref"] == "bindery/batch-1" and hp["sha"] == m.sha, f"branch pipeline {hp}")
else:
    check(hp["source"] == "merge_request_event" and hp["sha"] == m.sha, f"MR pipeline {hp}")

code = status_of(bot, "post", f"{base}/merge_requests/{mr.iid}/pipelines")
if SOURCE == "push":
    check(code == 400, f"MR pipeline in a branch-pipelines project: {code}")
    code = status_of(bot, "post", f"{base}/pipeline", query_data={"ref": "bindery/batch-1"})
    check(code == 201, f"branch pipeline through the API: {code}")
else:
    check(code == 200, f"MR pipeline creation answers {code}, GitLab answers 200")
pl = project.pipelines.get(hp["id"])
check(pl.status in ("success", "failed", "running", "pending", "created"), f"pipeline status {pl.status}")
check(status_of(bot, "post", f"{base}/pipelines/{pl.id}/retry") == 201, "pipeline retry answers 201")
jobs = pl.jobs.list(get_all=True)
check(len(jobs) == 1 and jobs[0].name == "test" and jobs[0].status == pl.status and
      jobs[0].web_url.endswith(f"/-/jobs/{jobs[0].id}") and jobs[0].pipeline["id"] == pl.id, f"pipeline jobs {jobs}")
other = "success" if pl.status == "failed" else "failed"
check(pl.jobs.list(scope=[other], get_all=True) == [], f"jobs in scope {other}")
check(status_of(bot, "get", f"{base}/pipelines/{pl.id}/jobs", query_data={"scope": "bogus"}) == 400, "an unknown job scope is a 400")

# Approvals: each reviewer account approves once; a second approve is refused.
for var in ("REVIEWER1_TOKEN", "REVIEWER2_TOKEN"):
    rev = client(os.environ[var])
    rmr = rev.projects.get(PROJECT, lazy=True).mergerequests.get(mr.iid)
    rmr.approve(sha=rmr.sha)
    try:
        rmr.approve()
        check(False, "a second approve was accepted")
    except gitlab.exceptions.GitlabError as e:
        check(e.response_code in (401, 304), f"second approve: {e.response_code}")
approvals = mr.approvals.get()
check(approvals.approved is True, f"approved {approvals.approved}")
check(sorted(a["user"]["username"] for a in approvals.approved_by) == ["reviewer-1", "reviewer-2"],
      f"approved_by {approvals.approved_by}")

# Another change lands on main: the MR needs a rebase; rebase asynchronously.
project.commits.create({"branch": "main", "commit_message": "someone else", "actions": [
    {"action": "create", "file_path": "other/x.txt", "content": "x\n"}]})
m = read_mr()
check(m.detailed_merge_status == "need_rebase", f"after main moved: {m.detailed_merge_status}")
rb = m.rebase()
check(rb == {"rebase_in_progress": True}, f"rebase answer {rb}")
for _ in range(50):
    m = project.mergerequests.get(mr.iid, include_rebase_in_progress=True)
    if not m.rebase_in_progress:
        break
    time.sleep(0.05)
check(not m.rebase_in_progress and m.merge_error is None, f"rebase ended: {m.rebase_in_progress} {m.merge_error}")
check(m.sha != commit.id, "the rebase moved the head")
m = read_mr()
check(m.detailed_merge_status == "mergeable", f"after the rebase: {m.detailed_merge_status}")

# Merge: a stale sha is refused with 409; the tested head merges.
code = status_of(bot, "put", f"{base}/merge_requests/{mr.iid}/merge", query_data={"sha": commit.id})
check(code == 409, f"merge with a stale sha: {code}")
merged = m.merge(should_remove_source_branch=True, sha=m.sha)
landed = project.branches.get("main").commit["id"]
if METHOD == "ff":
    # No merge commit: main is the head itself.
    check(merged["state"] == "merged" and merged["merge_commit_sha"] is None and landed == m.sha,
          f"fast-forward answer {merged['state']} {merged['merge_commit_sha']} (main {landed}, head {m.sha})")
else:
    check(merged["state"] == "merged" and merged["merge_commit_sha"] == landed, f"merge answer {merged['state']} {merged['merge_commit_sha']}")

# Close: an open MR closes; closing a merged one changes nothing.
project.commits.create({"branch": "bindery/batch-2", "start_branch": "main", "commit_message": "batch 2", "actions": [
    {"action": "create", "file_path": "bindings/carol.yaml", "content": "operationId: op-c\n"}]})
mr2 = project.mergerequests.create({"source_branch": "bindery/batch-2", "target_branch": "main", "title": "batch 2"})
mr2.state_event = "close"
mr2.save()
check(project.mergerequests.get(mr2.iid).state == "closed", "closed MR")
done = project.mergerequests.get(mr.iid)
done.state_event = "close"
done.save()
check(project.mergerequests.get(mr.iid).state == "merged", "closing a merged MR leaves it merged")
found = project.mergerequests.list(source_branch="bindery/batch-2", state="all")
check([x.iid for x in found] == [mr2.iid], f"MRs by source branch {[x.iid for x in found]}")

# Reading the repository as the drift check does: the tree of main page by page, a 404 for a
# path that is not there, and the commit that removed a file.
tree = project.repository_tree(ref="main", recursive=True, per_page=2, get_all=True)
blobs = [e["path"] for e in tree if e["type"] == "blob"]
check("bindings/alice.yaml" in blobs and "bindings/bob.yaml" in blobs and "other/x.txt" in blobs, f"tree of main {blobs}")
check(any(e["type"] == "tree" and e["path"] == "bindings" for e in tree), "the tree lists its directories")
check(all(len(e["id"]) == 40 for e in tree), f"tree entry ids {[e['id'] for e in tree]}")
try:
    project.repository_tree(path="nowhere", ref="main")
    check(False, "the tree of a missing path was answered")
except gitlab.exceptions.GitlabGetError as e:
    check(e.response_code == 404, f"tree of a missing path: {e.response_code}")
removal = project.commits.create({"branch": "main", "commit_message": "clean up", "actions": [
    {"action": "delete", "file_path": "bindings/bob.yaml"}]})
# (python-gitlab reads a "path" keyword as the URL's own path: the parameter goes in query_parameters.)
history = project.commits.list(query_parameters={"ref_name": "main", "path": "bindings/bob.yaml"}, per_page=1, get_all=False)
check(len(history) == 1 and history[0].id == removal.id and history[0].author_name, f"who removed the file {history}")

print(json.dumps({"source": SOURCE, "method": METHOD, "failures": failures}))
sys.exit(1 if failures else 0)
