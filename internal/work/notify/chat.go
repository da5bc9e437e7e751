package notify

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/vocab/explain"
	"bindery/store"
)

// Chat (notify.chat): a Slack-compatible incoming webhook. Slack, Mattermost and Rocket.Chat all
// take {"text": "…"}; the text is plain, with the link on a line of its own, which each of them
// turns into a link.

// chatSender posts one delivery to a chat.
type chatSender struct {
	c config.Chat
	n *Notifier
}

func (s chatSender) send(ctx context.Context, d store.Delivery, e store.Event, snap *config.Snapshot) result {
	body, err := json.Marshal(map[string]string{"text": ChatText(e, snap, s.n.links(snap))})
	if err != nil {
		return result{class: classInternal, err: "the message could not be written"}
	}
	return postJSON(ctx, s.n.hc, s.c.URL, http.Header{}, body)
}

// ChatText is an event as a chat message: its summary, the request's note and what to do, and
// the link to look at.
func ChatText(e store.Event, snap *config.Snapshot, l explain.Links) string {
	lines := []string{Summary(e, snap)}
	switch v := news(e, snap, l).(type) {
	case *api.RequestNews:
		if v.Note != "" {
			lines = append(lines, v.Note)
		}
		if v.MR != nil && v.MR.URL != "" {
			lines = append(lines, "Merge request: "+v.MR.URL)
		}
		lines = append(lines, v.URL)
	case *api.BatchNews:
		if v.MR != nil && v.MR.URL != "" {
			lines = append(lines, "Merge request: "+v.MR.URL)
		}
		lines = append(lines, v.URL)
	case *api.OpsNews:
		lines = append(lines, v.URL)
	}
	return strings.Join(lines, "\n")
}
