package sim

import (
	"context"
	"strings"
	"testing"
)

func TestTheSimulatedRunnerRunsTheJobsABranchPipelineWould(t *testing.T) {
	cfg := `
variables:
  GREETING: hello
deploy:
  stage: deploy
  image: alpine
  rules:
    - if: $CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH
  before_script: echo "before $GREETING"
  script:
    - echo "deploying $CI_PROJECT_PATH at $CI_COMMIT_SHA with $SECRET"
mr-only:
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
  script: echo never here
.hidden:
  script: echo never here either
`
	info := MergeInfo{Project: "grp/proj", SHA: "0123456789abcdef", Branch: "main", DefaultBranch: "main", CIConfig: cfg,
		Variables: map[string]string{"SECRET": "s3"}, InstanceURL: "http://gitlab.test"}
	ok, out := runJobs(context.Background(), info)
	if !ok {
		t.Fatalf("pipeline failed:\n%s", out)
	}
	for _, want := range []string{"before hello", "deploying grp/proj at 0123456789abcdef with s3"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "never here") {
		t.Errorf("a job whose rules do not match ran:\n%s", out)
	}

	info.Branch = "feature"
	if ok, out := runJobs(context.Background(), info); !ok || strings.Contains(out, "deploying") {
		t.Errorf("a pipeline of another branch ran the deploy job (ok %v):\n%s", ok, out)
	}
}

func TestTheSimulatedRunnerFailsAJobThatFailsOrItCannotRead(t *testing.T) {
	for name, cfg := range map[string]string{
		"a failing script":    "deploy:\n  script:\n    - exit 3\n",
		"an unsupported rule": "deploy:\n  rules:\n    - if: $A =~ /x/\n  script: echo hi\n",
		"no script":           "deploy:\n  stage: deploy\n",
		"not YAML":            "deploy: [\n",
	} {
		t.Run(name, func(t *testing.T) {
			ok, out := runJobs(context.Background(), MergeInfo{Project: "p", SHA: "abc", Branch: "main", DefaultBranch: "main", CIConfig: cfg})
			if ok || out == "" {
				t.Errorf("ok %v, out %q: want a failure that says why", ok, out)
			}
		})
	}
}
