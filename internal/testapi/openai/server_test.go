package openai

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

// post sends a Responses API request with the given input JSON.
func post(t *testing.T, base string, stream bool, input string) *http.Response {
	t.Helper()
	body := fmt.Sprintf(`{"model":"gpt-test","stream":%t,"input":%s,"tools":[{"type":"function","name":"exec_command"},{"type":"web_search"}]}`, stream, input)
	req, err := http.NewRequest(http.MethodPost, base+"/v1/responses", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer secret-test-key")
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
		if e.Data["type"] != e.Name || e.Data["sequence_number"] != float64(len(events)) {
			t.Errorf("event %s carries type %v, sequence number %v", e.Name, e.Data["type"], e.Data["sequence_number"])
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

func TestStreamsTheScript(t *testing.T) {
	srv, base := StartLoopback(t, Script{
		{Call: &Call{Name: "exec_command", Arguments: map[string]string{"cmd": "true"}}},
		{Text: "patching", Custom: &CustomCall{Name: "apply_patch", Input: "*** Begin Patch\n*** End Patch\n"}},
		{Text: "all done"},
	})
	first := post(t, base, true, `[{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}]`)
	if ct := first.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	events := readEvents(t, first.Body)
	want := []string{"response.created", "response.output_item.added", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done", "response.completed"}
	if got := names(events); !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if got := field(events[0].data, "response", "status"); got != "in_progress" {
		t.Errorf("response.created status %v", got)
	}
	if got := field(events[1].data, "item", "arguments"); got != "" {
		t.Errorf("added item's arguments %v, want empty", got)
	}
	item := field(events[4].data, "item").(map[string]any)
	if item["type"] != "function_call" || item["call_id"] != CallID(0) || item["name"] != "exec_command" || item["arguments"] != `{"cmd":"true"}` {
		t.Errorf("output_item.done %v", item)
	}
	if got := field(events[5].data, "response", "usage", "total_tokens"); got != float64(2) {
		t.Errorf("completed usage %v", got)
	}

	second := readEvents(t, post(t, base, true, `[{"type":"function_call_output","call_id":"call_hookbox_00","output":"ok"}]`).Body)
	want = []string{"response.created",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done", "response.output_item.done",
		"response.completed"}
	if got := names(second); !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if got := field(second[1].data, "item", "content"); !reflect.DeepEqual(got, []any{}) {
		t.Errorf("added message's content %v, want []", got)
	}
	if got := field(second[3].data, "delta"); got != "patching" {
		t.Errorf("text delta %v", got)
	}
	custom := field(second[10].data, "item").(map[string]any)
	if custom["type"] != "custom_tool_call" || custom["call_id"] != CallID(1) || custom["input"] != "*** Begin Patch\n*** End Patch\n" {
		t.Errorf("custom call %v", custom)
	}

	for i, want := range []string{"all done", FinalText} {
		events := readEvents(t, post(t, base, true, `[]`).Body)
		if got := field(events[3].data, "delta"); got != want {
			t.Errorf("request %d: text %v, want %q", i+3, got, want)
		}
	}

	reqs := srv.ModelRequests()
	if len(reqs) != 4 {
		t.Fatalf("%d model requests recorded, want 4", len(reqs))
	}
	if got, ok := reqs[1].CallOutput(CallID(0)); !ok || got != "ok" {
		t.Errorf("output of the first call: %q %v", got, ok)
	}
	if got := reqs[0].ToolNames(); !reflect.DeepEqual(got, []string{"exec_command", "web_search"}) {
		t.Errorf("tool names %v", got)
	}
}

func TestCallOutputAsParts(t *testing.T) {
	var r ResponsesRequest
	if err := json.Unmarshal([]byte(`{"input":[{"type":"custom_tool_call_output","call_id":"c","output":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]}]}`), &r); err != nil {
		t.Fatal(err)
	}
	if got, ok := r.CallOutput("c"); !ok || got != "ab" {
		t.Errorf("CallOutput %q %v", got, ok)
	}
}

func TestAnswersWithoutStreaming(t *testing.T) {
	_, base := StartLoopback(t, Script{{Call: &Call{Name: "exec_command", Arguments: map[string]int{"n": 1}}}})
	var resp struct {
		Object, Status, Model string
		Output                []struct{ Type, CallID, Name, Arguments string }
	}
	if err := json.NewDecoder(post(t, base, false, `[]`).Body).Decode(&resp); err != nil {
		t.Fatal(err)
	}
	if resp.Object != "response" || resp.Status != "completed" || resp.Model != "gpt-test" || len(resp.Output) != 1 ||
		resp.Output[0].Type != "function_call" || resp.Output[0].Arguments != `{"n":1}` {
		t.Errorf("response %+v", resp)
	}
}

func TestRecordsNoCredentials(t *testing.T) {
	srv, base := StartLoopback(t, nil)
	post(t, base, false, `[]`)
	r := srv.Requests()[0]
	if !r.HasAPIKey || r.Header.Get("Authorization") != "" || r.Method != http.MethodPost || r.Path != "/v1/responses" {
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
		Error struct{ Message, Type, Code string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusNotFound || body.Error.Type != "invalid_request_error" || body.Error.Code != "unknown_url" || body.Error.Message == "" {
		t.Errorf("%d %+v", resp.StatusCode, body)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "GET /v1/models") {
		t.Errorf("logged %q", logged)
	}
	if got := s.Requests(); len(got) != 1 || got[0].Path != "/v1/models" {
		t.Errorf("recorded %+v", got)
	}
}

func TestScriptMistakesPanic(t *testing.T) {
	for name, script := range map[string]Script{
		"array arguments": {{Call: &Call{Name: "exec_command", Arguments: []string{"ls"}}}},
		"two calls":       {{Call: &Call{Name: "a"}, Custom: &CustomCall{Name: "b", Input: "x"}}},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("NewServer accepted the script")
				}
			}()
			NewServer(script)
		})
	}
}
