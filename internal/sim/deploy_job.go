package sim

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The simulated runner: with Options.RunJobs, the branch pipeline a merge starts runs the jobs
// of the project's .gitlab-ci.yml (as it is at the merged commit) on this machine, as a shell
// runner would: before_script and script in sh -e, with GitLab's predefined variables and the
// project's CI/CD variables in the environment. It is how the deploy callback job shipped in
// deploy/gitlab/ is exercised: the same file an operator commits runs here.
//
// What it understands of the file is the part such a job needs: jobs with script (a string or a
// list), before_script, variables, and rules whose if compares variables with == or != (joined
// by &&) and whose when is on_success or never. image and stage are ignored: every job runs
// once, in the order of the file. Anything else in a rule fails the job, saying why.

const ciConfigPath = ".gitlab-ci.yml"

// jobTimeout bounds one job; a deploy job that hangs fails, as a runner's timeout would.
const jobTimeout = time.Minute

// ciJob is one job of the file.
type ciJob struct {
	Name         string
	Script       []string
	BeforeScript []string
	Variables    map[string]string
	Rules        []ciRule
}

type ciRule struct {
	If   string `yaml:"if"`
	When string `yaml:"when"`
}

// reservedKeys are the top-level keys of .gitlab-ci.yml that are not jobs.
var reservedKeys = []string{"stages", "variables", "default", "include", "workflow", "image", "services", "cache", "before_script", "after_script"}

// parseCIConfig reads the jobs of a .gitlab-ci.yml and its global variables.
func parseCIConfig(src string) ([]ciJob, map[string]string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", ciConfigPath, err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("%s: not a mapping of jobs", ciConfigPath)
	}
	root := doc.Content[0]
	globals := map[string]string{}
	var jobs []ciJob
	for i := 0; i+1 < len(root.Content); i += 2 {
		name, body := root.Content[i].Value, root.Content[i+1]
		if name == "variables" {
			if err := body.Decode(&globals); err != nil {
				return nil, nil, fmt.Errorf("%s: variables: %w", ciConfigPath, err)
			}
			continue
		}
		if slices.Contains(reservedKeys, name) || strings.HasPrefix(name, ".") {
			continue
		}
		var raw struct {
			Script       yaml.Node         `yaml:"script"`
			BeforeScript yaml.Node         `yaml:"before_script"`
			Variables    map[string]string `yaml:"variables"`
			Rules        []ciRule          `yaml:"rules"`
		}
		if err := body.Decode(&raw); err != nil {
			return nil, nil, fmt.Errorf("%s: job %s: %w", ciConfigPath, name, err)
		}
		job := ciJob{Name: name, Variables: raw.Variables, Rules: raw.Rules}
		var err error
		if job.Script, err = scriptLines(&raw.Script); err != nil || len(job.Script) == 0 {
			return nil, nil, fmt.Errorf("%s: job %s: script must be a string or a list of strings", ciConfigPath, name)
		}
		if job.BeforeScript, err = scriptLines(&raw.BeforeScript); err != nil {
			return nil, nil, fmt.Errorf("%s: job %s: before_script must be a string or a list of strings", ciConfigPath, name)
		}
		jobs = append(jobs, job)
	}
	return jobs, globals, nil
}

func scriptLines(n *yaml.Node) ([]string, error) {
	switch n.Kind {
	case 0:
		return nil, nil
	case yaml.ScalarNode:
		return []string{n.Value}, nil
	}
	var out []string
	err := n.Decode(&out)
	return out, err
}

var ruleTermRE = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)\s*(==|!=)\s*(?:\$([A-Za-z_][A-Za-z0-9_]*)|"([^"]*)"|'([^']*)')$`)

// runs decides whether a job runs in a pipeline with env, by its rules: the first rule whose if
// holds (or that has none) decides; no rule matching skips the job; no rules runs it.
func (j ciJob) runs(env map[string]string) (bool, error) {
	if len(j.Rules) == 0 {
		return true, nil
	}
	for _, r := range j.Rules {
		ok := true
		if r.If != "" {
			for _, term := range strings.Split(r.If, "&&") {
				m := ruleTermRE.FindStringSubmatch(strings.TrimSpace(term))
				if m == nil {
					return false, fmt.Errorf("job %s: the simulated runner reads rules of the form $A == $B or $A == \"text\" (joined by &&), not %q", j.Name, r.If)
				}
				right := m[4] + m[5]
				if m[3] != "" {
					right = env[m[3]]
				}
				if (env[m[1]] == right) != (m[2] == "==") {
					ok = false
				}
			}
		}
		if ok {
			switch r.When {
			case "", "on_success", "always":
				return true, nil
			case "never":
				return false, nil
			default:
				return false, fmt.Errorf("job %s: when: %s is not simulated", j.Name, r.When)
			}
		}
	}
	return false, nil
}

// pipelineEnv is what GitLab gives every job of a push pipeline on the merged branch.
func pipelineEnv(info MergeInfo) map[string]string {
	env := map[string]string{
		"CI": "true", "GITLAB_CI": "true", "CI_PIPELINE_SOURCE": "push",
		"CI_PROJECT_PATH": info.Project, "CI_PROJECT_ID": fmt.Sprint(info.ProjectID),
		"CI_COMMIT_SHA": info.SHA, "CI_COMMIT_SHORT_SHA": info.SHA[:min(8, len(info.SHA))],
		"CI_COMMIT_BRANCH": info.Branch, "CI_COMMIT_REF_NAME": info.Branch, "CI_DEFAULT_BRANCH": info.DefaultBranch,
		"CI_SERVER_URL": info.InstanceURL, "CI_API_V4_URL": info.InstanceURL + "/api/v4",
		"CI_PROJECT_URL": info.InstanceURL + "/" + info.Project,
	}
	for k, v := range info.Variables {
		env[k] = v
	}
	return env
}

// runJobs runs the merge's branch pipeline and returns whether every job that ran passed, and
// what they printed (the end of it).
func runJobs(ctx context.Context, info MergeInfo) (bool, string) {
	jobs, globals, err := parseCIConfig(info.CIConfig)
	if err != nil {
		return false, err.Error()
	}
	base := pipelineEnv(info)
	var log bytes.Buffer
	passed := true
	for _, j := range jobs {
		env := map[string]string{}
		for k, v := range globals {
			env[k] = v
		}
		for k, v := range base {
			env[k] = v // predefined and project variables take precedence over the file's globals
		}
		for k, v := range j.Variables {
			env[k] = os.Expand(v, func(name string) string { return env[name] })
		}
		env["CI_JOB_NAME"] = j.Name
		run, err := j.runs(env)
		if err != nil {
			fmt.Fprintf(&log, "%v\n", err)
			passed = false
			continue
		}
		if !run {
			continue
		}
		fmt.Fprintf(&log, "$ job %s\n", j.Name)
		if !runScript(ctx, j, env, &log) {
			passed = false
		}
	}
	out := log.String()
	if len(out) > 4096 {
		out = "…" + out[len(out)-4096:]
	}
	return passed, out
}

func runScript(ctx context.Context, j ciJob, env map[string]string, log *bytes.Buffer) bool {
	ctx, cancel := context.WithTimeout(ctx, jobTimeout)
	defer cancel()
	script := strings.Join(append(append([]string(nil), j.BeforeScript...), j.Script...), "\n")
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", script)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	cmd.Dir = os.TempDir()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(log, "job %s failed: %v\n", j.Name, err)
		return false
	}
	return true
}
