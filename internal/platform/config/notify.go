package config

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"bindery/internal/vocab/state"
)

// Notify area: who is told what (docs/notifications.md). The receivers — webhook endpoints, the
// SMTP server, chats — are checked strictly: a receiver that is wrong is not half-used. A key
// whose value is refused keeps the value of the configuration in force (the last good one) and
// the rest of the file loads; the report, the ops console and the config.refused event say so.

// Webhook is one outgoing webhook endpoint (Standard Webhooks v1).
type Webhook struct {
	Name string // unique; default "webhook-" and 8 hex digits of the URL's hash
	URL  string
	// Secrets sign each delivery, one signature per secret (several while a secret is rotated):
	// whsec_ and the key in base64.
	Secrets []string
	// Events are the types sent; nil: every type but the batch's own ("*").
	Events []state.EventType
}

// Wants reports whether the endpoint subscribes to t.
func (w Webhook) Wants(t state.EventType) bool {
	return t.Public() && (w.Events == nil || slices.Contains(w.Events, t))
}

// Chat is one Slack-compatible incoming webhook (Slack, Mattermost, Rocket.Chat): the operators'
// events, and the requests of Projects.
type Chat struct {
	Name     string
	URL      string
	Events   []state.EventType // nil: the operators' events
	Projects []string          // the requester's events of these projects are posted too
}

// Wants reports whether the chat posts t about a request of project ("" : none).
func (c Chat) Wants(t state.EventType, project string) bool {
	if !t.Public() {
		return false
	}
	if c.Events != nil && slices.Contains(c.Events, t) {
		return true
	}
	if c.Events == nil && t.Info().Audience == state.AudienceOperators {
		return true
	}
	return project != "" && t.Info().Audience == state.AudienceRequester && slices.Contains(c.Projects, project)
}

// STARTTLS policies of notify.email.starttls.
const (
	StartTLSRequired      = "required"
	StartTLSOpportunistic = "opportunistic"
	StartTLSNone          = "none"
)

// Email is the SMTP server requesters are emailed through (zero: no email).
type Email struct {
	SMTP     string // host:port
	From     string // the sender's address
	Username string // "" : no authentication
	Password string
	StartTLS string // required, opportunistic or none
}

// On reports whether email is configured.
func (e Email) On() bool { return e.SMTP != "" }

type notifySettings struct {
	webhooks     []Webhook
	email        Email
	chats        []Chat
	mrNotes      bool
	timeout      time.Duration
	disableAfter time.Duration
	keepAttempts time.Duration
	// expiryReminders: how long before a binding expires its holder is reminded, longest first.
	expiryReminders []time.Duration
	// refused lists the keys of this area whose value was refused (the last good one kept).
	refused []string
}

func init() {
	register(
		Key{
			Name: "notify.webhooks", Type: "list of {name, url, secrets, events}", Default: "(none)",
			Doc: "Outgoing webhooks (Standard Webhooks v1): each event of the listed types (or \"*\": every type but the batch's own) is POSTed to url as {type, timestamp, data}, signed with each of secrets " +
				"(whsec_ and a base64 key of 24 to 64 bytes; list two while rotating). name (default: from the URL) names the endpoint in the ops console.",
			Misconfig: "missing/blank → no webhooks; an entry without an absolute http(s) url, with a secret that is not whsec_ and base64 of 24 to 64 bytes, an unknown event type or a duplicate name refuses the key: the last good list stays in force, reported and told to operators (config.refused).",
			apply: notifyKey("notify.webhooks", func(s *Snapshot, v value) (string, error) {
				ws, err := parseWebhooks(v)
				if err != nil {
					return "", err
				}
				s.webhooks = ws
				return fmt.Sprintf("%d endpoints", len(ws)), nil
			}, func(s, last *Snapshot) string {
				s.webhooks = last.webhooks
				return fmt.Sprintf("%d endpoints", len(s.webhooks))
			}),
		},
		Key{
			Name: "notify.email", Type: "{smtp, from, username, password, starttls}", Default: "(no email)",
			Doc: "The SMTP server requesters are emailed through: smtp host:port, from (the sender's address), username and password (optional: no authentication without them), " +
				"starttls required (default: refuse a server without it), opportunistic or none. A requester's address is their account when it is an email address, else the identity directory's.",
			Misconfig: "missing/blank → no email; an smtp that is not host:port, a from that is not an address, or an unknown starttls refuses the key: the last good setting stays in force, reported and told to operators (config.refused).",
			apply: notifyKey("notify.email", func(s *Snapshot, v value) (string, error) {
				e, err := parseEmail(v)
				if err != nil {
					return "", err
				}
				s.email = e
				return e.describe(), nil
			}, func(s, last *Snapshot) string { s.email = last.email; return s.email.describe() }),
		},
		Key{
			Name: "notify.chat", Type: "list of {name, url, events, projects}", Default: "(none)",
			Doc:       "Slack-compatible incoming webhooks (Slack, Mattermost, Rocket.Chat take the same JSON): the operators' events (or the listed event types), and every requester's event of the listed projects.",
			Misconfig: "missing/blank → no chat; an entry without an absolute http(s) url, an unknown event type or a duplicate name refuses the key: the last good list stays in force, reported and told to operators (config.refused).",
			apply: notifyKey("notify.chat", func(s *Snapshot, v value) (string, error) {
				cs, err := parseChats(v)
				if err != nil {
					return "", err
				}
				s.chats = cs
				return fmt.Sprintf("%d chats", len(cs)), nil
			}, func(s, last *Snapshot) string { s.chats = last.chats; return fmt.Sprintf("%d chats", len(s.chats)) }),
		},
		Key{
			Name: "notify.mrNotes", Type: "bool", Default: "true",
			Doc:       "The bot writes one note on each batch's merge request when it opens, listing its members with links to their requests, and edits it when a bisection isolates the change that fails.",
			Misconfig: "blank or invalid → true: the note is written unless switched off with a clear false.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				var note string
				s.mrNotes, note = boolOr(v, true, true)
				return strconv.FormatBool(s.mrNotes), note, nil
			},
		},
		Key{
			Name: "notify.timeout", Type: "duration", Default: "10s",
			Doc:       "Longest one delivery attempt may take (connect, send, answer); a receiver that hangs longer fails the attempt, which is tried again by the schedule.",
			Misconfig: "blank, unparsable, ≤ 0 or above 1m → 10s.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				d, note := durationOr(v, 10*time.Second)
				if d > time.Minute {
					d, note = 10*time.Second, "above the maximum 1m"
				}
				s.timeout = d
				return d.String(), note, nil
			},
		},
		Key{
			Name: "notify.disableAfter", Type: "duration", Default: "120h",
			Doc:       "An endpoint whose deliveries have failed for this long without a success is disabled, and operators are told (endpoint.disabled); an operator enables it again in the ops console.",
			Misconfig: "blank, unparsable or ≤ 0 → 120h.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				var note string
				s.disableAfter, note = durationOr(v, 120*time.Hour)
				return s.disableAfter.String(), note, nil
			},
		},
		Key{
			Name: "notify.keepAttempts", Type: "duration", Default: "720h",
			Doc:       "How long the record of each delivery attempt (status, latency, error class) is kept before it is purged.",
			Misconfig: "blank, unparsable or ≤ 0 → 720h.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				var note string
				s.keepAttempts, note = durationOr(v, 720*time.Hour)
				return s.keepAttempts.String(), note, nil
			},
		},
		Key{
			Name: "notify.expiryReminders", Type: "list of durations (days such as 7d, or such as 36h)", Default: "[7d, 1d]",
			Doc: "How long before a binding expires its holder is reminded (binding.expiring, once per binding and reminder, emailed unless they chose otherwise), " +
				"with when it expires and a link to renew it on the request page. off: no reminders.",
			Misconfig: "missing/blank → [7d, 1d]; off → no reminders; a list with an entry that is not a positive number of days or a duration, or longer than 365d → [7d, 1d], noted.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				ds, note := expiryReminders(v)
				s.expiryReminders = ds
				return remindersText(ds), note, nil
			},
		},
	)
}

// defaultReminders is notify.expiryReminders' default.
var defaultReminders = []time.Duration{7 * 24 * time.Hour, 24 * time.Hour}

// expiryReminders reads notify.expiryReminders: longest first, each once.
func expiryReminders(v value) ([]time.Duration, string) {
	if sc, ok := v.scalar(); ok && strings.EqualFold(sc, "off") {
		return nil, ""
	}
	items, note := stringList(v)
	if note != "" || len(items) == 0 {
		return defaultReminders, note
	}
	var out []time.Duration
	for _, it := range items {
		d, err := parseTTL(it)
		if err != nil || d <= 0 || d > 365*24*time.Hour {
			return defaultReminders, fmt.Sprintf("%q is not a positive number of days or a duration of at most 365d", it)
		}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b time.Duration) int { return int((b - a) / time.Second) })
	return out, ""
}

// remindersText is the effective list as the report shows it.
func remindersText(ds []time.Duration) string {
	if len(ds) == 0 {
		return "off"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = DurationWords(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// DurationWords is a duration as the configuration writes it: whole days as 7d, else Go's form.
func DurationWords(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
	return d.String()
}

// notifyKey is a receiver key's apply: parse, and when the value is refused, keep the last good
// configuration's (none at the first load: the receivers of the key are off), noted.
func notifyKey(name string, parse func(s *Snapshot, v value) (string, error), keep func(s, last *Snapshot) string) func(s *Snapshot, v value) (string, string, error) {
	return func(s *Snapshot, v value) (string, string, error) {
		if !v.present || v.blank() {
			eff, _ := parse(s, value{})
			return eff, blankOnly(v), nil
		}
		eff, err := parse(s, v)
		if err == nil {
			return eff, "", nil
		}
		s.refused = append(s.refused, name)
		if s.last == nil {
			eff, _ = parse(s, value{})
			return eff, fmt.Sprintf("refused (%v); nothing is sent through it until it is fixed", err), nil
		}
		return keep(s, s.last), fmt.Sprintf("refused (%v); the last good value stays in force", err), nil
	}
}

var receiverName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// receiverEntry is one list item of notify.webhooks or notify.chat as written.
type receiverEntry struct {
	Name     string     `yaml:"name"`
	URL      string     `yaml:"url"`
	Secrets  []string   `yaml:"secrets"`
	Events   eventsList `yaml:"events"`
	Projects []string   `yaml:"projects"`
}

// eventsList is an entry's events: a list of types, or "*" written alone.
type eventsList []string

func (l *eventsList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = eventsList{n.Value}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return errors.New("events: want a list of event types, or \"*\"")
	}
	*l = list
	return nil
}

func decodeEntries(v value) ([]receiverEntry, error) {
	if v.node == nil {
		return nil, nil
	}
	if v.node.Kind != yaml.SequenceNode {
		return nil, errors.New("not a list of endpoints")
	}
	var out []receiverEntry
	for i, item := range v.node.Content {
		var e receiverEntry
		if err := decodeStrict(item, &e); err != nil {
			return nil, fmt.Errorf("entry %d: %v", i+1, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// entryName is the entry's name, given or made of its URL.
func entryName(prefix string, e receiverEntry, i int, seen map[string]bool) (string, error) {
	name := strings.TrimSpace(e.Name)
	if name == "" {
		sum := sha256.Sum256([]byte(e.URL))
		name = prefix + "-" + hex.EncodeToString(sum[:4])
	}
	if !receiverName.MatchString(name) {
		return "", fmt.Errorf("entry %d: name %q is not [a-z0-9-], at most 63 characters", i+1, name)
	}
	if seen[name] {
		return "", fmt.Errorf("entry %d: name %q is taken by an earlier entry", i+1, name)
	}
	seen[name] = true
	return name, nil
}

// eventList reads an entry's events: nil for "*" (or none written, when all is true).
func eventList(raw []string, i int) ([]state.EventType, error) {
	if len(raw) == 0 || slices.Contains(raw, "*") {
		if len(raw) > 1 {
			return nil, fmt.Errorf("entry %d: events: \"*\" and a list at once", i+1)
		}
		return nil, nil
	}
	var out []state.EventType
	for _, r := range raw {
		t := state.EventType(strings.TrimSpace(r))
		if !t.Public() {
			return nil, fmt.Errorf("entry %d: %q is not an event type that is sent (see docs/notifications.md)", i+1, r)
		}
		out = append(out, t)
	}
	return out, nil
}

func parseWebhooks(v value) ([]Webhook, error) {
	entries, err := decodeEntries(v)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []Webhook
	for i, e := range entries {
		if !absoluteHTTP(e.URL) {
			return nil, fmt.Errorf("entry %d: url %q is not an absolute http(s) URL", i+1, clip(e.URL))
		}
		if len(e.Projects) > 0 {
			return nil, fmt.Errorf("entry %d: projects is a key of notify.chat, not of a webhook", i+1)
		}
		name, err := entryName("webhook", e, i, seen)
		if err != nil {
			return nil, err
		}
		if len(e.Secrets) == 0 {
			return nil, fmt.Errorf("entry %d: no secrets: every delivery is signed", i+1)
		}
		for j, sec := range e.Secrets {
			if err := CheckWebhookSecret(sec); err != nil {
				return nil, fmt.Errorf("entry %d: secret %d: %v", i+1, j+1, err)
			}
		}
		events, err := eventList(e.Events, i)
		if err != nil {
			return nil, err
		}
		out = append(out, Webhook{Name: name, URL: e.URL, Secrets: e.Secrets, Events: events})
	}
	return out, nil
}

// CheckWebhookSecret checks a Standard Webhooks secret: "whsec_" and base64 of 24 to 64 bytes.
func CheckWebhookSecret(sec string) error {
	key, ok := strings.CutPrefix(sec, "whsec_")
	if !ok {
		return errors.New("does not start with whsec_")
	}
	raw, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		return errors.New("is not base64 after whsec_")
	}
	if len(raw) < 24 || len(raw) > 64 {
		return fmt.Errorf("is %d bytes, want 24 to 64", len(raw))
	}
	return nil
}

func parseChats(v value) ([]Chat, error) {
	entries, err := decodeEntries(v)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []Chat
	for i, e := range entries {
		if !absoluteHTTP(e.URL) {
			return nil, fmt.Errorf("entry %d: url %q is not an absolute http(s) URL", i+1, clip(e.URL))
		}
		if len(e.Secrets) > 0 {
			return nil, fmt.Errorf("entry %d: secrets is a key of notify.webhooks, not of a chat", i+1)
		}
		name, err := entryName("chat", e, i, seen)
		if err != nil {
			return nil, err
		}
		events, err := eventList(e.Events, i)
		if err != nil {
			return nil, err
		}
		out = append(out, Chat{Name: name, URL: e.URL, Events: events, Projects: e.Projects})
	}
	return out, nil
}

func parseEmail(v value) (Email, error) {
	if v.node == nil {
		return Email{}, nil
	}
	var raw struct {
		SMTP     string `yaml:"smtp"`
		From     string `yaml:"from"`
		Username string `yaml:"username"`
		Password string `yaml:"password"`
		StartTLS string `yaml:"starttls"`
	}
	if v.node.Kind != yaml.MappingNode {
		return Email{}, errors.New("not a mapping {smtp, from, …}")
	}
	if err := decodeStrict(v.node, &raw); err != nil {
		return Email{}, err
	}
	host, port, err := net.SplitHostPort(raw.SMTP)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
		return Email{}, fmt.Errorf("smtp %q is not host:port", clip(raw.SMTP))
	}
	from, err := mail.ParseAddress(raw.From)
	if err != nil || !strings.Contains(from.Address, "@") {
		return Email{}, fmt.Errorf("from %q is not an email address", clip(raw.From))
	}
	tls := strings.ToLower(strings.TrimSpace(raw.StartTLS))
	switch tls {
	case "":
		tls = StartTLSRequired
	case StartTLSRequired, StartTLSOpportunistic, StartTLSNone:
	default:
		return Email{}, fmt.Errorf("starttls %q is not required, opportunistic or none", clip(raw.StartTLS))
	}
	if (raw.Username == "") != (raw.Password == "") {
		return Email{}, errors.New("username and password go together")
	}
	return Email{SMTP: raw.SMTP, From: raw.From, Username: raw.Username, Password: raw.Password, StartTLS: tls}, nil
}

// describe is the setting as the ops console shows it (never the password).
func (e Email) describe() string {
	if !e.On() {
		return "(no email)"
	}
	auth := "no authentication"
	if e.Username != "" {
		auth = "as " + e.Username
	}
	return fmt.Sprintf("%s, from %s, starttls %s, %s", e.SMTP, e.From, e.StartTLS, auth)
}

// Webhooks is notify.webhooks, the outgoing webhook endpoints. Default none; a refused value
// keeps the last good list (none at the first load).
func (s *Snapshot) Webhooks() []Webhook { return s.webhooks }

// Email is notify.email, the SMTP server requesters are emailed through. Default: no email; a
// refused value keeps the last good setting (no email at the first load).
func (s *Snapshot) Email() Email { return s.email }

// Chats is notify.chat, the Slack-compatible incoming webhooks. Default none; a refused value
// keeps the last good list (none at the first load).
func (s *Snapshot) Chats() []Chat { return s.chats }

// MRNotes is notify.mrNotes: a note on each batch's merge request. Default true; blank or
// invalid → true.
func (s *Snapshot) MRNotes() bool { return s.mrNotes }

// NotifyTimeout is notify.timeout, the longest one delivery attempt may take. Default 10s;
// blank, unparsable, ≤ 0 or above 1m → 10s.
func (s *Snapshot) NotifyTimeout() time.Duration { return s.timeout }

// NotifyDisableAfter is notify.disableAfter: an endpoint failing this long is disabled. Default
// 120h; blank, unparsable or ≤ 0 → 120h.
func (s *Snapshot) NotifyDisableAfter() time.Duration { return s.disableAfter }

// ExpiryReminders is notify.expiryReminders: how long before a binding expires its holder is
// reminded, longest first. Default [7d, 1d]; missing or blank → the default; off → none (nil); a
// list with an entry that is not a positive number of days or duration, or above 365d → the
// default, noted.
func (s *Snapshot) ExpiryReminders() []time.Duration { return s.expiryReminders }

// NotifyKeepAttempts is notify.keepAttempts, how long attempts are kept. Default 720h; blank,
// unparsable or ≤ 0 → 720h.
func (s *Snapshot) NotifyKeepAttempts() time.Duration { return s.keepAttempts }

// RefusedKeys names the keys whose value this snapshot refused and kept from the last good
// configuration (or switched off, at the first load).
func (s *Snapshot) RefusedKeys() []string { return s.refused }

// EndpointKey is the name a receiver's health is tracked by: "webhook:<name>", "chat:<name>".
func EndpointKey(channel, name string) string { return channel + ":" + name }
