// Package proc runs the built bindery binary as child processes, for the tools that need real
// processes (go run ./cmd/bench, the chaos test): build it, start a child with its output in a log
// file, wait until it answers, stop or kill it.
package proc

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Build builds package pkg of the module at dir into out the way README.md says
// (CGO_ENABLED=0 go build), with extra build flags.
func Build(ctx context.Context, dir, out, pkg string, flags ...string) error {
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
	}
	return nil
}

// FreeAddr finds a free loopback port. Another process may take it before the caller binds it;
// the caller then fails loudly when its child cannot listen.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Process is a started child with its output in a log file of its own.
type Process struct {
	Name string
	Log  string // path of its output
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set when done is closed
}

// Start starts bin with args, its output in a new log file under dir, with extraEnv added to
// this process's environment. When ctx ends the child is stopped (Stop), so an interrupted
// caller leaves no servers behind.
func Start(ctx context.Context, dir string, extraEnv []string, name, bin string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if len(extraEnv) > 0 {
		cmd.Env = append(os.Environ(), extraEnv...)
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	go func() {
		select {
		case <-ctx.Done():
			p.Stop()
		case <-p.done:
		}
	}()
	return p, nil
}

// Pid is the child's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Kill sends SIGKILL (a crash: no shutdown code runs) and waits for the child to end.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop asks the child to shut down (SIGTERM), then kills it after 10 s.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.Kill()
	}
}

// Exited reports whether the child ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Tail is the last n lines of the child's output, for error messages.
func (p *Process) Tail(n int) string {
	data, _ := os.ReadFile(p.Log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitReady polls url until it answers 200, the child exits, ctx ends or timeout passes. It
// polls every 2 ms: the bench measures start-to-ready with it.
func WaitReady(ctx context.Context, p *Process, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s exited before it was ready (%v):\n%s", p.Name, err, p.Tail(20))
		}
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after %s:\n%s", p.Name, url, timeout, p.Tail(20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}
