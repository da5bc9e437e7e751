// Package rehearsal holds the test that follows docs/install.md as written (go test -tags e2e
// ./internal/ops/rehearsal, run by .ci/run): it runs the guide's marked command blocks in order,
// on this machine, against `bindery sim` as GitLab, approval system, deploy runner and identity
// provider and a MariaDB database of its own, and checks that a person's request goes through the
// installed deployment — signed in with OpenID Connect on either instance, applied, approved,
// merged, in effect through the shipped deploy job — and through a backup and its restore. It has
// no code of its own: the guide is the program.
package rehearsal
