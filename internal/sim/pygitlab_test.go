package sim_test

import (
	"os"
	"os/exec"
	"testing"
)

// python-gitlab (Debian package python3-gitlab), a client we did not write, drives the simulated
// GitLab through every endpoint bindery uses, once per pipeline source and once with fast-forward
// merges (testdata/python_gitlab_conformance.py). Without it the test skips loudly, unless
// BINDERY_REQUIRE_PYGITLAB=1 (as in CI) makes that a failure.

// pythonWithGitLab is an interpreter that can import gitlab: BINDERY_PYTHON, else the system
// python3 (where the Debian package installs it), else the python3 on PATH.
func pythonWithGitLab(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("BINDERY_PYTHON"), "/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		// The client class, not just the name: a directory called gitlab on the path imports as
		// an empty namespace package.
		if p != "" && exec.Command(p, "-c", "import gitlab; gitlab.Gitlab").Run() == nil {
			return p
		}
	}
	if os.Getenv("BINDERY_REQUIRE_PYGITLAB") != "" {
		t.Fatal("BINDERY_REQUIRE_PYGITLAB is set but no python3 can import gitlab (apt-get install python3-gitlab)")
	}
	t.Skip("\n*** SKIPPING PYTHON-GITLAB CONFORMANCE: no python3 with python-gitlab (apt-get install python3-gitlab; BINDERY_REQUIRE_PYGITLAB=1 makes this fail) ***")
	return ""
}

func TestPythonGitLabDrivesTheSimulator(t *testing.T) {
	python := pythonWithGitLab(t)
	for _, run := range []struct{ source, method string }{
		{"merge_request_event", "rebase_merge"}, {"merged_result", "rebase_merge"}, {"push", "rebase_merge"},
		{"merge_request_event", "ff"}, // a fast-forward merge has no merge commit
	} {
		t.Run(run.source+"/"+run.method, func(t *testing.T) {
			source := run.source
			e := newEnv(t, withKnobs("pipelineSource: "+source, "mergeMethod: "+run.method), nil)
			cmd := exec.Command(python, "testdata/python_gitlab_conformance.py", e.url+"/sim/gitlab", source, run.method)
			cmd.Env = append(os.Environ(), "BOT_TOKEN=bot-token", "REVIEWER1_TOKEN=rev1-token", "REVIEWER2_TOKEN=rev2-token")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("python-gitlab against the simulator (%s): %v\n%s", source, err, out)
			}
			t.Logf("%s", out)
		})
	}
}
