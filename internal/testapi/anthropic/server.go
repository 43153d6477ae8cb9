// Package anthropic is a scripted stand-in for the Anthropic Messages API,
// close enough for the real Claude Code CLI to run an agent loop against
// it: each model request gets the script's next turn, streamed as
// server-sent events the way the API streams them, and every request is
// recorded for the test to inspect. It is imported only by tests.
package anthropic

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
// first). A turn with a tool call ends with stop_reason tool_use, one
// without with end_turn.
type Turn struct {
	Text    string
	ToolUse *ToolUse
}

// ToolUse is a call of the named tool with Input, marshalled as JSON.
type ToolUse struct {
	Name  string
	Input any
}

// Script is the turns the server answers model requests with, in order:
// every POST /v1/messages takes the next one. Once it is used up, every
// request gets FinalText, ending the conversation. Claude Code sends a
// side request (a session title) before the first turn unless its
// non-essential traffic is off, which would take a turn: run it with
// QuietEnv.
type Script []Turn

// FinalText answers model requests beyond the script.
const FinalText = "Done."

// Request is one HTTP request the server received. Credentials are never
// recorded, only whether some were sent and the digest of x-api-key.
type Request struct {
	Method, Path, RawQuery string
	Header                 http.Header // without x-api-key and authorization
	HasAPIKey              bool        // x-api-key or authorization was sent
	// APIKeySHA256 is the hex sha256 of the x-api-key value ("" if none),
	// so a test can check which key arrived without holding it.
	APIKeySHA256 string
	// Authorization: an Authorization header was sent too.
	Authorization bool
	Messages      *MessagesRequest // the decoded body of a model request
}

// MessagesRequest is the part of a Messages API request body tests look at.
type MessagesRequest struct {
	Model    string    `json:"model"`
	Stream   bool      `json:"stream"`
	Messages []Message `json:"messages"`
	Tools    []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

// Message is one message of a conversation; Content is always a list of
// blocks (the API also accepts a bare string, read as one text block).
type Message struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
}

// Content is a message's content blocks.
type Content []Block

// UnmarshalJSON accepts a string as one text block, as the API does.
func (c *Content) UnmarshalJSON(data []byte) error {
	var text string
	if json.Unmarshal(data, &text) == nil {
		*c = Content{{Type: "text", Text: text}}
		return nil
	}
	return json.Unmarshal(data, (*[]Block)(c))
}

// Text is the concatenated text of the text blocks.
func (c Content) Text() string {
	var b strings.Builder
	for _, blk := range c {
		if blk.Type == "text" {
			b.WriteString(blk.Text)
		}
	}
	return b.String()
}

// Block is one content block: text, tool_use or tool_result (its Content
// is itself text or blocks).
type Block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   Content         `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// ToolResult finds the tool_result block answering tool call id in the
// request's messages.
func (m *MessagesRequest) ToolResult(id string) (Block, bool) {
	for _, msg := range m.Messages {
		for _, blk := range msg.Content {
			if blk.Type == "tool_result" && blk.ToolUseID == id {
				return blk, true
			}
		}
	}
	return Block{}, false
}

// ToolUseID is the id the server gives the tool call of script turn i
// (counting from 0), for finding its tool_result.
func ToolUseID(i int) string { return fmt.Sprintf("toolu_hookbox_%02d", i) }

// Server serves the Messages API from a Script. It is an http.Handler.
type Server struct {
	// Logf, when set, is told of requests for paths the server does not
	// serve (they get the API's 404 error).
	Logf func(format string, args ...any)

	script  Script
	inputs  []json.RawMessage // the script's tool inputs, marshalled
	session *scripted.Session[Request]
}

// NewServer returns a server answering with script. It panics if a tool
// input does not marshal to a JSON object: the script is wrong.
func NewServer(script Script) *Server {
	s := &Server{script: script, session: scripted.NewSession[Request](len(script)), inputs: make([]json.RawMessage, len(script))}
	for i, turn := range script {
		if turn.ToolUse == nil {
			continue
		}
		s.inputs[i] = scripted.ObjectJSON("anthropic.NewServer", i, turn.ToolUse.Input)
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

// ModelRequests returns the requests to POST /v1/messages, in order.
func (s *Server) ModelRequests() []*MessagesRequest {
	var out []*MessagesRequest
	for _, r := range s.Requests() {
		if r.Messages != nil {
			out = append(out, r.Messages)
		}
	}
	return out
}

// ServeHTTP records the request and answers it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone()}
	rec.HasAPIKey = rec.Header.Get("X-Api-Key") != "" || rec.Header.Get("Authorization") != ""
	rec.Authorization = len(rec.Header.Values("Authorization")) > 0
	rec.APIKeySHA256 = scripted.KeyDigest(rec.Header.Values("X-Api-Key"))
	rec.Header.Del("X-Api-Key")
	rec.Header.Del("Authorization")
	switch {
	case r.URL.Path == "/" && (r.Method == http.MethodHead || r.Method == http.MethodGet):
		// Claude Code warms its connection up with HEAD / (when it uses
		// no proxy); any answer will do.
		s.record(rec)
		w.WriteHeader(http.StatusOK)
	case r.URL.Path == "/v1/messages" && r.Method == http.MethodPost:
		var body MessagesRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&body); err != nil {
			s.record(rec)
			writeError(w, http.StatusBadRequest, "invalid_request_error", "decoding the request body: "+err.Error())
			return
		}
		rec.Messages = &body
		msg := s.reply(rec)
		if body.Stream {
			stream(w, msg)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(msg)
	case r.URL.Path == "/v1/messages/count_tokens" && r.Method == http.MethodPost:
		s.record(rec)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"input_tokens":1}`)
	default:
		s.record(rec)
		if s.Logf != nil {
			s.Logf("scripted Anthropic API: no such endpoint %s %s", r.Method, r.URL)
		}
		writeError(w, http.StatusNotFound, "not_found_error", "Not found: "+r.Method+" "+r.URL.Path)
	}
}

func (s *Server) record(r Request) { s.session.Record(r) }

// reply records a model request and builds its answer from the next turn
// of the script, or the final text once the script is used up.
func (s *Server) reply(r Request) message {
	index, ok := s.session.Next(r)
	turn, input := Turn{Text: FinalText}, json.RawMessage(nil)
	if ok {
		turn, input = s.script[index], s.inputs[index]
	}
	msg := message{
		ID: fmt.Sprintf("msg_hookbox_%02d", index), Type: "message", Role: "assistant", Model: r.Messages.Model,
		Content: []contentBlock{}, Usage: usage{InputTokens: 1, OutputTokens: 1},
	}
	stop := "end_turn"
	if turn.Text != "" || turn.ToolUse == nil {
		msg.Content = append(msg.Content, contentBlock{Type: "text", Text: &turn.Text})
	}
	if turn.ToolUse != nil {
		stop = "tool_use"
		msg.Content = append(msg.Content, contentBlock{Type: "tool_use", ID: ToolUseID(index), Name: turn.ToolUse.Name, Input: input})
	}
	msg.StopReason = &stop
	return msg
}

// message is the API's response message; Content holds the complete
// blocks, which streaming sends piece by piece.
type message struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []contentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        usage          `json:"usage"`
}

type contentBlock struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

type usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// stream sends msg as the API's server-sent events: the message without
// content or stop reason, each block as start, one delta and stop, then the
// stop reason and the end.
func stream(w http.ResponseWriter, msg message) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	start := msg
	start.Content, start.StopReason = []contentBlock{}, nil
	event(w, "message_start", map[string]any{"type": "message_start", "message": start})
	for i, blk := range msg.Content {
		empty, delta := blk, map[string]any{}
		switch blk.Type {
		case "text":
			empty.Text = new(string)
			delta = map[string]any{"type": "text_delta", "text": *blk.Text}
		case "tool_use":
			empty.Input = json.RawMessage("{}")
			delta = map[string]any{"type": "input_json_delta", "partial_json": string(blk.Input)}
		}
		event(w, "content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": empty})
		event(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": delta})
		event(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	event(w, "message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": *msg.StopReason, "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": msg.Usage.OutputTokens},
	})
	event(w, "message_stop", map[string]any{"type": "message_stop"})
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
func writeError(w http.ResponseWriter, status int, kind, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"type":  "error",
		"error": map[string]string{"type": kind, "message": message},
	})
}
