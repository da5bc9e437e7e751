package identity

// Demo mode trusts a user picked in the SPA's switcher (docs/api.md, 'Who may call'): the header
// DemoHeader or the cookie DemoCookie, only when the process runs as `bindery demo`.
const (
	DemoHeader = "X-Bindery-User"
	DemoCookie = "bindery_user"
)

// demoEntries are the demo users. alice and bob are requesters; ops is the operator (the demo
// permission rules grant it the ops rule code). All three spellings of each resolve to one
// identity.
var demoEntries = []Entry{
	{Account: "alice@example.com", EmployeeID: "E1001", Name: "alice"},
	{Account: "bob@example.com", EmployeeID: "E1002", Name: "bob"},
	{Account: "ops@example.com", EmployeeID: "E1003", Name: "ops"},
}

// DemoUsers lists the demo users, in the switcher's order.
func DemoUsers() []Entry { return append([]Entry(nil), demoEntries...) }

// DemoDirectory is the directory of the demo users.
func DemoDirectory() *Directory {
	d, err := NewDirectory(demoEntries)
	if err != nil {
		panic(err) // the literal above is valid; a test keeps it so
	}
	return d
}

// DemoUserNames lists the demo users' short names, for the SPA's switcher.
func DemoUserNames() []string {
	names := make([]string, len(demoEntries))
	for i, e := range demoEntries {
		names[i] = e.Name
	}
	return names
}
