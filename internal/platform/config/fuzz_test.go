package config

import (
	"reflect"
	"testing"
	"time"
)

// FuzzParse: whatever bytes the config file holds, Parse answers a snapshot or an error — never
// a panic — and a snapshot that parses answers every getter without panicking (a reload swaps
// it in, and every request then calls its getters).
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"", "\x00\xff", "ratelimit:\n  apply: 3\n", "ratelimit: [1, 2]\n", "apply: {mode: OPEN, window: 'Mon-Fri 10:00-18:00', timezone: UTC}\n",
		"targets:\n  - key: a\n    project: a/b\n    path: \"x/{subject}.yaml\"\n    ttl: 720h\n",
		"a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n", "server:\n\tport: 1\n", "batch:\n  maxRequests: 1e309\n",
		"identity:\n  directory: [{account: a@b.c, employeeId: '1', name: a}]\n", "permissions:\n  rules: {x: [a@b.c]}\n",
		"hooks: {approvalSkew: -1s, approvalSecret: s}\n", "poll: {shortInterval: .nan, shortCount: .inf}\n", "sim:\n  gitlab: {failRate: 2}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		snap, err := Parse(data)
		if err != nil {
			if snap != nil {
				t.Fatal("an error with a snapshot: half a configuration must never be returned")
			}
			return
		}
		callEveryGetter(t, snap)
	})
}

// callEveryGetter calls each exported method of snap with plausible arguments, so a new getter
// is covered without editing this list.
func callEveryGetter(t *testing.T, snap *Snapshot) {
	t.Helper()
	v := reflect.ValueOf(snap)
	for i := 0; i < v.NumMethod(); i++ {
		m, name := v.Method(i), v.Type().Method(i).Name
		args := make([]reflect.Value, m.Type().NumIn())
		for j := range args {
			args[j] = getterArg(m.Type().In(j))
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%s panicked: %v", name, p)
				}
			}()
			m.Call(args)
		}()
	}
}

func getterArg(tp reflect.Type) reflect.Value {
	switch {
	case tp == reflect.TypeOf(time.Time{}):
		return reflect.ValueOf(time.Date(2026, 3, 2, 4, 0, 0, 0, time.UTC))
	case tp.Kind() == reflect.String:
		return reflect.ValueOf("ratelimit.apply").Convert(tp)
	case tp.Kind() == reflect.Slice && tp.Elem().Kind() == reflect.String:
		return reflect.ValueOf([]string{"b-owners", "ops"}).Convert(tp)
	case tp.Kind() == reflect.Int:
		return reflect.ValueOf(10).Convert(tp)
	}
	return reflect.Zero(tp)
}
