// Package openai is a scripted stand-in for the OpenAI Responses API,
// close enough for the real Codex CLI to run an agent loop against it:
// each model request gets the script's next turn, streamed as server-sent
// events the way the API streams them, and every request is recorded for
// the test to inspect. It is imported only by tests.
package openai

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/testapi/scripted"
)

// Turn is one model response: some text, a tool call, or both (text
// first). A turn calls a function tool (Call) or a custom tool (Custom),
// not both.
type Turn struct {
	Text   string
	Call   *Call
	Custom *CustomCall
}

// Call is a call of the named function tool with Arguments, marshalled as
// a JSON object.
type Call struct {
	Name      string
	Arguments any
}

// CustomCall is a call of the named custom (freeform) tool with Input as
// its raw text: Codex's apply_patch is one, taking a patch.
type CustomCall struct {
	Name  string
	Input string
}

// Script is the turns the server answers model requests with, in order:
// every POST /v1/responses takes the next one. Once it is used up, every
// request gets FinalText, ending the conversation.
type Script []Turn

// FinalText answers model requests beyond the script.
const FinalText = "Done."

// Request is one HTTP request the server received. Credentials are never
// recorded, only whether some were sent.
type Request struct {
	Method, Path, RawQuery string
	Header                 http.Header // without authorization
	HasAPIKey              bool        // a bearer token was sent
	// KeySHA256 is the hex sha256 of the bearer token(s) (scripted.KeyDigest).
	KeySHA256 string
	Responses *ResponsesRequest // the decoded body of a model request
}

// ResponsesRequest is the part of a Responses API request body tests look
// at.
type ResponsesRequest struct {
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
	Input  []Item `json:"input"`
	Tools  []Tool `json:"tools"`
}

// Tool is one tool the client offers: a function (Name set), or a built-in
// or custom tool named by Type and Name.
type Tool struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// Item is one input item: a message, a tool call the model made, or the
// output of one (Output is a string or a list of content parts).
type Item struct {
	Type      string          `json:"type"`
	Role      string          `json:"role,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	Name      string          `json:"name,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	Arguments string          `json:"arguments,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
}

// CallOutput finds the output answering tool call id (function or custom)
// in the request's input, as text.
func (r *ResponsesRequest) CallOutput(id string) (string, bool) {
	for _, it := range r.Input {
		if it.CallID == id && strings.HasSuffix(it.Type, "_call_output") {
			return partsText(it.Output), true
		}
	}
	return "", false
}

// ToolNames lists the names (or, for unnamed built-ins, the types) of the
// offered tools.
func (r *ResponsesRequest) ToolNames() []string {
	var out []string
	for _, t := range r.Tools {
		if t.Name != "" {
			out = append(out, t.Name)
		} else {
			out = append(out, t.Type)
		}
	}
	return out
}

// partsText reads content that is a string or a list of parts with text.
func partsText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct{ Text string }
	json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// CallID is the call id the server gives the tool call of script turn i
// (counting from 0), for finding its output.
func CallID(i int) string { return fmt.Sprintf("call_hookbox_%02d", i) }

// Server serves the Responses API from a Script. It is an http.Handler.
type Server struct {
	// Logf, when set, is told of requests for paths the server does not
	// serve (they get the API's 404 error).
	Logf func(format string, args ...any)

	script  Script
	args    []string // the script's call arguments, marshalled
	session *scripted.Session[Request]
}

// NewServer returns a server answering with script. It panics if a turn
// makes two calls or call arguments do not marshal to a JSON object: the
// script is wrong.
func NewServer(script Script) *Server {
	s := &Server{script: script, session: scripted.NewSession[Request](len(script)), args: make([]string, len(script))}
	for i, turn := range script {
		if turn.Call != nil && turn.Custom != nil {
			panic(fmt.Sprintf("openai.NewServer: turn %d calls both a function and a custom tool", i))
		}
		if turn.Call == nil {
			continue
		}
		s.args[i] = string(scripted.ObjectJSON("openai.NewServer", i, turn.Call.Arguments))
	}
	return s
}

// Start serves script on l until the test ends, logging unknown paths to
// the test log, and returns the server and its base URL (http://addr).
func Start(t testing.TB, l net.Listener, script Script) (*Server, string) {
	s := NewServer(script)
	s.Logf = t.Logf
	return s, scripted.Serve(t, l, s)
}

// StartLoopback serves script on a loopback port until the test ends and
// returns the server and its base URL (http://127.0.0.1:port).
func StartLoopback(t testing.TB, script Script) (*Server, string) {
	t.Helper()
	return Start(t, scripted.Loopback(t), script)
}

// Requests returns every request received so far, in order.
func (s *Server) Requests() []Request {
	return s.session.Requests()
}

// ModelRequests returns the requests to POST /v1/responses, in order.
func (s *Server) ModelRequests() []*ResponsesRequest {
	var out []*ResponsesRequest
	for _, r := range s.Requests() {
		if r.Responses != nil {
			out = append(out, r.Responses)
		}
	}
	return out
}

// ServeHTTP records the request and answers it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone()}
	rec.HasAPIKey = strings.TrimPrefix(rec.Header.Get("Authorization"), "Bearer ") != ""
	var tokens []string
	for _, v := range rec.Header.Values("Authorization") {
		tokens = append(tokens, strings.TrimPrefix(v, "Bearer "))
	}
	rec.KeySHA256 = scripted.KeyDigest(tokens)
	rec.Header.Del("Authorization")
	if r.URL.Path != "/v1/responses" || r.Method != http.MethodPost {
		s.record(rec)
		if s.Logf != nil {
			s.Logf("scripted OpenAI API: no such endpoint %s %s", r.Method, r.URL)
		}
		writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", "Invalid URL ("+r.Method+" "+r.URL.Path+")")
		return
	}
	var body ResponsesRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&body); err != nil {
		s.record(rec)
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "decoding the request body: "+err.Error())
		return
	}
	rec.Responses = &body
	resp := s.reply(rec)
	if body.Stream {
		stream(w, resp)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

func (s *Server) record(r Request) { s.session.Record(r) }

// reply records a model request and builds its answer from the next turn
// of the script, or the final text once the script is used up.
func (s *Server) reply(r Request) response {
	index, ok := s.session.Next(r)
	turn, args := Turn{Text: FinalText}, ""
	if ok {
		turn, args = s.script[index], s.args[index]
	}
	resp := response{
		ID: fmt.Sprintf("resp_hookbox_%02d", index), Object: "response", Status: "completed", Model: r.Responses.Model,
		Output: []outputItem{},
		Usage:  usage{InputTokens: 1, OutputTokens: 1, TotalTokens: 2},
	}
	if turn.Text != "" || (turn.Call == nil && turn.Custom == nil) {
		text := turn.Text
		resp.Output = append(resp.Output, outputItem{
			ID: fmt.Sprintf("msg_hookbox_%02d", index), Type: "message", Status: "completed", Role: "assistant",
			Content: []contentPart{{Type: "output_text", Text: text, Annotations: []any{}}},
		})
	}
	if turn.Call != nil {
		resp.Output = append(resp.Output, outputItem{
			ID: fmt.Sprintf("fc_hookbox_%02d", index), Type: "function_call", Status: "completed",
			CallID: CallID(index), Name: turn.Call.Name, Arguments: &args,
		})
	}
	if turn.Custom != nil {
		resp.Output = append(resp.Output, outputItem{
			ID: fmt.Sprintf("ctc_hookbox_%02d", index), Type: "custom_tool_call", Status: "completed",
			CallID: CallID(index), Name: turn.Custom.Name, Input: &turn.Custom.Input,
		})
	}
	return resp
}

// response is the API's response object; Output holds the complete items,
// which streaming sends piece by piece.
type response struct {
	ID     string       `json:"id"`
	Object string       `json:"object"`
	Status string       `json:"status"`
	Model  string       `json:"model"`
	Output []outputItem `json:"output"`
	Usage  usage        `json:"usage"`
}

type outputItem struct {
	ID        string        `json:"id"`
	Type      string        `json:"type"`
	Status    string        `json:"status"`
	Role      string        `json:"role,omitempty"`
	Content   []contentPart `json:"content,omitzero"`
	CallID    string        `json:"call_id,omitempty"`
	Name      string        `json:"name,omitempty"`
	Arguments *string       `json:"arguments,omitempty"`
	Input     *string       `json:"input,omitempty"`
}

type contentPart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// stream sends resp as the API's server-sent events: the response in
// progress, each output item as added, one delta, done, then the completed
// response.
func stream(w http.ResponseWriter, resp response) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	seq := 0
	send := func(name string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = name, seq
		seq++
		event(w, name, fields)
	}
	created := resp
	created.Status, created.Output = "in_progress", []outputItem{}
	send("response.created", map[string]any{"response": created})
	for i, item := range resp.Output {
		added := item
		added.Status = "in_progress"
		switch item.Type {
		case "message":
			added.Content = []contentPart{}
			send("response.output_item.added", map[string]any{"output_index": i, "item": added})
			text := item.Content[0].Text
			part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
			send("response.content_part.added", map[string]any{"item_id": item.ID, "output_index": i, "content_index": 0, "part": part})
			send("response.output_text.delta", map[string]any{"item_id": item.ID, "output_index": i, "content_index": 0, "delta": text})
			send("response.output_text.done", map[string]any{"item_id": item.ID, "output_index": i, "content_index": 0, "text": text})
			part["text"] = text
			send("response.content_part.done", map[string]any{"item_id": item.ID, "output_index": i, "content_index": 0, "part": part})
		case "function_call":
			empty := ""
			added.Arguments = &empty
			send("response.output_item.added", map[string]any{"output_index": i, "item": added})
			send("response.function_call_arguments.delta", map[string]any{"item_id": item.ID, "output_index": i, "delta": *item.Arguments})
			send("response.function_call_arguments.done", map[string]any{"item_id": item.ID, "output_index": i, "arguments": *item.Arguments})
		case "custom_tool_call":
			empty := ""
			added.Input = &empty
			send("response.output_item.added", map[string]any{"output_index": i, "item": added})
			send("response.custom_tool_call_input.delta", map[string]any{"item_id": item.ID, "output_index": i, "delta": *item.Input})
			send("response.custom_tool_call_input.done", map[string]any{"item_id": item.ID, "output_index": i, "input": *item.Input})
		}
		send("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	send("response.completed", map[string]any{"response": resp})
}

// event writes one server-sent event and flushes it.
func event(w http.ResponseWriter, name string, data any) {
	b, _ := json.Marshal(data) // maps and structs of plain values
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// writeError answers with the API's error shape.
func writeError(w http.ResponseWriter, status int, kind, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"message": message, "type": kind, "param": nil, "code": code},
	})
}
