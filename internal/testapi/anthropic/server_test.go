package anthropic

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/testapi/scripted"
)

// post sends a Messages API request with the given messages JSON.
func post(t *testing.T, base string, stream bool, messages string) *http.Response {
	t.Helper()
	body := fmt.Sprintf(`{"model":"claude-test","stream":%t,"messages":%s,"tools":[{"name":"Bash"}]}`, stream, messages)
	req, err := http.NewRequest(http.MethodPost, base+"/v1/messages?beta=true", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", "secret-test-key")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// sse is one server-sent event: its name and decoded data.
type sse struct {
	name string
	data map[string]any
}

func readEvents(t *testing.T, r io.Reader) []sse {
	t.Helper()
	var events []sse
	for _, e := range scripted.ReadEvents(t, r) {
		if e.Data["type"] != e.Name {
			t.Errorf("event %s carries type %v", e.Name, e.Data["type"])
		}
		events = append(events, sse{e.Name, e.Data})
	}
	return events
}

func names(events []sse) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.name)
	}
	return out
}

// field walks data along keys.
func field(data map[string]any, keys ...string) any {
	var v any = data
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

var oneBlock = []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}

func TestStreamsTheScript(t *testing.T) {
	srv, base := StartLoopback(t, Script{
		{ToolUse: &ToolUse{Name: "Bash", Input: map[string]string{"command": "true"}}},
		{Text: "thinking aloud", ToolUse: &ToolUse{Name: "Read"}},
		{Text: "all done"},
	})
	first := post(t, base, true, `[{"role":"user","content":"go"}]`)
	if ct := first.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	events := readEvents(t, first.Body)
	if got := names(events); !reflect.DeepEqual(got, oneBlock) {
		t.Fatalf("events %v, want %v", got, oneBlock)
	}
	if got := field(events[0].data, "message", "stop_reason"); got != nil {
		t.Errorf("message_start stop_reason %v, want null", got)
	}
	block := field(events[1].data, "content_block").(map[string]any)
	if block["type"] != "tool_use" || block["id"] != ToolUseID(0) || block["name"] != "Bash" || !reflect.DeepEqual(block["input"], map[string]any{}) {
		t.Errorf("content_block_start %v", block)
	}
	if got := field(events[2].data, "delta"); !reflect.DeepEqual(got, map[string]any{"type": "input_json_delta", "partial_json": `{"command":"true"}`}) {
		t.Errorf("delta %v", got)
	}
	if got := field(events[4].data, "delta", "stop_reason"); got != "tool_use" {
		t.Errorf("stop_reason %v, want tool_use", got)
	}

	second := readEvents(t, post(t, base, true, `[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_hookbox_00","content":"ok"}]}]`).Body)
	if got := len(second); got != 9 { // two blocks
		t.Fatalf("%d events for text and tool call: %v", got, names(second))
	}
	if got := field(second[2].data, "delta", "text"); got != "thinking aloud" {
		t.Errorf("text delta %v", got)
	}
	if got := field(second[5].data, "delta", "partial_json"); got != "{}" {
		t.Errorf("tool without input: partial_json %v, want {}", got)
	}

	for i, want := range []string{"all done", FinalText, FinalText} {
		events := readEvents(t, post(t, base, true, `[]`).Body)
		if got := field(events[2].data, "delta", "text"); got != want {
			t.Errorf("request %d: text %v, want %q", i+3, got, want)
		}
		if got := field(events[4].data, "delta", "stop_reason"); got != "end_turn" {
			t.Errorf("request %d: stop_reason %v, want end_turn", i+3, got)
		}
	}

	reqs := srv.ModelRequests()
	if len(reqs) != 5 {
		t.Fatalf("%d model requests recorded, want 5", len(reqs))
	}
	result, ok := reqs[1].ToolResult(ToolUseID(0))
	if !ok || result.Content.Text() != "ok" {
		t.Errorf("tool_result of the first call: %+v %v", result, ok)
	}
	if got := reqs[0].Messages[0].Content.Text(); got != "go" {
		t.Errorf("string content read as %q", got)
	}
}

func TestAnswersWithoutStreaming(t *testing.T) {
	_, base := StartLoopback(t, Script{{ToolUse: &ToolUse{Name: "Bash", Input: map[string]int{"n": 1}}}})
	resp := post(t, base, false, `[{"role":"user","content":"go"}]`)
	var msg struct {
		Type, Role, Model string
		StopReason        string `json:"stop_reason"`
		Content           []struct {
			Type, ID, Name string
			Input          map[string]int
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	if msg.Type != "message" || msg.Role != "assistant" || msg.Model != "claude-test" || msg.StopReason != "tool_use" ||
		len(msg.Content) != 1 || msg.Content[0].ID != ToolUseID(0) || msg.Content[0].Input["n"] != 1 {
		t.Errorf("message %+v", msg)
	}
}

func TestRecordsNoCredentials(t *testing.T) {
	srv, base := StartLoopback(t, nil)
	post(t, base, false, `[]`)
	r := srv.Requests()[0]
	if !r.HasAPIKey || r.Header.Get("X-Api-Key") != "" || r.Method != http.MethodPost || r.Path != "/v1/messages" || r.RawQuery != "beta=true" {
		t.Errorf("recorded %+v", r)
	}
	if strings.Contains(fmt.Sprintf("%#v", srv.Requests()), "secret-test-key") {
		t.Error("the API key's value was recorded")
	}
}

func TestUnknownPathIsAnAPIError(t *testing.T) {
	s := NewServer(nil)
	var logged []string
	s.Logf = func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }
	ts := httptest.NewServer(s)
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusNotFound || body.Type != "error" || body.Error.Type != "not_found_error" || body.Error.Message == "" {
		t.Errorf("%d %+v", resp.StatusCode, body)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "GET /v1/models") {
		t.Errorf("logged %q", logged)
	}
	if got := s.Requests(); len(got) != 1 || got[0].Path != "/v1/models" {
		t.Errorf("recorded %+v", got)
	}
}

func TestToolInputMustBeAnObject(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewServer accepted a tool input that is a JSON array")
		}
	}()
	NewServer(Script{{ToolUse: &ToolUse{Name: "Bash", Input: []string{"ls"}}}})
}
