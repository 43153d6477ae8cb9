package gemini

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// post calls model method action with the given contents JSON.
func post(t *testing.T, base, action, contents string) *http.Response {
	t.Helper()
	body := fmt.Sprintf(`{"contents":%s,"tools":[{"functionDeclarations":[{"name":"run_shell_command"},{"name":"write_file"}]}]}`, contents)
	url := base + "/v1beta/models/gemini-test:" + action
	if action == "streamGenerateContent" {
		url += "?alt=sse"
	}
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Goog-Api-Key", "secret-test-key")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// readChunks decodes a stream's data lines.
func readChunks(t *testing.T, r io.Reader) []chunk {
	t.Helper()
	var out []chunk
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var c chunk
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				t.Fatalf("chunk %q: %v", data, err)
			}
			out = append(out, c)
		}
	}
	return out
}

func TestStreamsTheScript(t *testing.T) {
	srv, base := StartLoopback(t, Script{
		{Call: &Call{Name: "run_shell_command", Args: map[string]string{"command": "true"}}},
		{Text: "thinking aloud", Call: &Call{Name: "write_file"}},
		{Text: "all done"},
	})
	first := post(t, base, "streamGenerateContent", `[{"role":"user","parts":[{"text":"go"}]}]`)
	if ct := first.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	chunks := readChunks(t, first.Body)
	if len(chunks) != 1 {
		t.Fatalf("%d chunks for one call, want 1", len(chunks))
	}
	cand := chunks[0].Candidates[0]
	call := cand.Content.Parts[0].FunctionCall
	if cand.Content.Role != "model" || cand.FinishReason != "STOP" || call == nil || call.ID != CallID(0) || call.Name != "run_shell_command" || string(call.Args) != `{"command":"true"}` {
		t.Errorf("chunk %+v, call %+v", cand, call)
	}
	if u := chunks[0].UsageMetadata; u == nil || u.TotalTokenCount != 2 {
		t.Errorf("usage %+v", u)
	}

	second := readChunks(t, post(t, base, "streamGenerateContent",
		`[{"role":"user","parts":[{"functionResponse":{"id":"call_hookbox_00","name":"run_shell_command","response":{"output":"ok"}}}]}]`).Body)
	if len(second) != 2 || second[0].Candidates[0].Content.Parts[0].Text != "thinking aloud" || second[0].Candidates[0].FinishReason != "" ||
		second[0].UsageMetadata != nil || string(second[1].Candidates[0].Content.Parts[0].FunctionCall.Args) != "{}" {
		t.Errorf("text and call: %+v", second)
	}

	for i, want := range []string{"all done", FinalText} {
		var resp chunk
		if err := json.NewDecoder(post(t, base, "generateContent", `[]`).Body).Decode(&resp); err != nil {
			t.Fatal(err)
		}
		if got := resp.Candidates[0].Content.Parts[0].Text; got != want || resp.Candidates[0].FinishReason != "STOP" {
			t.Errorf("request %d: %+v, want text %q", i+3, resp, want)
		}
	}

	reqs := srv.ModelRequests()
	if len(reqs) != 4 {
		t.Fatalf("%d model requests recorded, want 4", len(reqs))
	}
	if got, ok := reqs[1].FunctionResponse(CallID(0)); !ok || got.Name != "run_shell_command" || string(got.Response) != `{"output":"ok"}` {
		t.Errorf("response to the first call: %+v %v", got, ok)
	}
	if got := reqs[0].FunctionNames(); !reflect.DeepEqual(got, []string{"run_shell_command", "write_file"}) {
		t.Errorf("function names %v", got)
	}
	if r := srv.Requests()[0]; r.Model != "gemini-test" || r.Action != "streamGenerateContent" || r.RawQuery != "alt=sse" {
		t.Errorf("recorded %+v", r)
	}
}

func TestGenerateContentMergesParts(t *testing.T) {
	_, base := StartLoopback(t, Script{{Text: "first", Call: &Call{Name: "write_file", Args: map[string]int{"n": 1}}}})
	var resp chunk
	if err := json.NewDecoder(post(t, base, "generateContent", `[]`).Body).Decode(&resp); err != nil {
		t.Fatal(err)
	}
	parts := resp.Candidates[0].Content.Parts
	if len(parts) != 2 || parts[0].Text != "first" || parts[1].FunctionCall == nil || string(parts[1].FunctionCall.Args) != `{"n":1}` {
		t.Errorf("parts %+v", parts)
	}
}

func TestCountTokens(t *testing.T) {
	srv, base := StartLoopback(t, Script{{Text: "kept for the model"}})
	var body struct{ TotalTokens int }
	if err := json.NewDecoder(post(t, base, "countTokens", `[]`).Body).Decode(&body); err != nil || body.TotalTokens != 1 {
		t.Errorf("countTokens %+v %v", body, err)
	}
	if len(srv.ModelRequests()) != 0 {
		t.Error("countTokens took a scripted turn")
	}
}

func TestRecordsNoCredentials(t *testing.T) {
	srv, base := StartLoopback(t, nil)
	post(t, base, "generateContent", `[]`)
	resp, err := http.Post(base+"/v1beta/models/m:countTokens?key=secret-test-key", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, r := range srv.Requests() {
		if !r.HasAPIKey || r.Header.Get("X-Goog-Api-Key") != "" || r.RawQuery != "" {
			t.Errorf("recorded %+v", r)
		}
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
	resp, err := http.Get(ts.URL + "/v1beta/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct {
			Code            int
			Message, Status string
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusNotFound || body.Error.Code != 404 || body.Error.Status != "NOT_FOUND" || body.Error.Message == "" {
		t.Errorf("%d %+v", resp.StatusCode, body)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "GET /v1beta/models") {
		t.Errorf("logged %q", logged)
	}
}

func TestArgsMustBeAnObject(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewServer accepted arguments that are a JSON array")
		}
	}()
	NewServer(Script{{Call: &Call{Name: "run_shell_command", Args: []string{"ls"}}}})
}
