// Package gemini is a scripted stand-in for the Gemini API
// (generativelanguage v1beta), close enough for the real Gemini CLI to run
// an agent loop against it: each model request gets the script's next
// turn, streamed as server-sent events the way the API streams them, and
// every request is recorded for the test to inspect. It is imported only
// by tests.
package gemini

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

// Turn is one model response: some text, a function call, or both (text
// first). A turn with a call still ends with finishReason STOP, as the API
// does; the client sees the functionCall part.
type Turn struct {
	Text string
	Call *Call
}

// Call is a call of the named function with Args, marshalled as a JSON
// object.
type Call struct {
	Name string
	Args any
}

// Script is the turns the server answers model requests with, in order:
// every generateContent or streamGenerateContent request takes the next
// one. Once it is used up, every request gets FinalText.
type Script []Turn

// FinalText answers model requests beyond the script.
const FinalText = "Done."

// Request is one HTTP request the server received. Credentials are never
// recorded, only whether some were sent.
type Request struct {
	Method, Path, RawQuery string
	Header                 http.Header // without x-goog-api-key and authorization
	HasAPIKey              bool        // x-goog-api-key, a key parameter or authorization was sent
	// KeySHA256 is the hex sha256 of the x-goog-api-key value(s)
	// (scripted.KeyDigest); a key parameter or authorization is not in it.
	KeySHA256 string
	// OtherCredential: a key parameter or an authorization header came too.
	OtherCredential bool
	Model, Action   string           // from /v1beta/models/{Model}:{Action}
	Generate        *GenerateRequest // the decoded body of a model request
}

// GenerateRequest is the part of a generateContent request body tests
// look at.
type GenerateRequest struct {
	Contents []Content `json:"contents"`
	Tools    []struct {
		FunctionDeclarations []struct {
			Name string `json:"name"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
}

// Content is one turn of the conversation.
type Content struct {
	Role  string `json:"role"`
	Parts []Part `json:"parts"`
}

// Part is one part of a turn: text, a function call or a function's
// response.
type Part struct {
	Text             string            `json:"text,omitempty"`
	FunctionCall     *FunctionCall     `json:"functionCall,omitempty"`
	FunctionResponse *FunctionResponse `json:"functionResponse,omitempty"`
}

// FunctionCall is a call the model made.
type FunctionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

// FunctionResponse is the client's answer to a call; Response is an
// object whose shape the client chooses (Gemini CLI sends {"output": …}).
type FunctionResponse struct {
	ID       string          `json:"id,omitempty"`
	Name     string          `json:"name"`
	Response json.RawMessage `json:"response"`
}

// FunctionNames lists the declared functions' names.
func (g *GenerateRequest) FunctionNames() []string {
	var out []string
	for _, t := range g.Tools {
		for _, f := range t.FunctionDeclarations {
			out = append(out, f.Name)
		}
	}
	return out
}

// FunctionResponse finds the response to call id in the request's
// contents.
func (g *GenerateRequest) FunctionResponse(id string) (FunctionResponse, bool) {
	for _, c := range g.Contents {
		for _, p := range c.Parts {
			if p.FunctionResponse != nil && p.FunctionResponse.ID == id {
				return *p.FunctionResponse, true
			}
		}
	}
	return FunctionResponse{}, false
}

// CallID is the id the server gives the function call of script turn i
// (counting from 0), for finding its response.
func CallID(i int) string { return fmt.Sprintf("call_hookbox_%02d", i) }

// Server serves the Gemini API from a Script. It is an http.Handler.
type Server struct {
	// Logf, when set, is told of requests for paths the server does not
	// serve (they get the API's 404 error).
	Logf func(format string, args ...any)

	script  Script
	args    []json.RawMessage // the script's call arguments, marshalled
	session *scripted.Session[Request]
}

// NewServer returns a server answering with script. It panics if call
// arguments do not marshal to a JSON object: the script is wrong.
func NewServer(script Script) *Server {
	s := &Server{script: script, session: scripted.NewSession[Request](len(script)), args: make([]json.RawMessage, len(script))}
	for i, turn := range script {
		if turn.Call == nil {
			continue
		}
		s.args[i] = scripted.ObjectJSON("gemini.NewServer", i, turn.Call.Args)
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

// ModelRequests returns the generateContent and streamGenerateContent
// requests, in order.
func (s *Server) ModelRequests() []*GenerateRequest {
	var out []*GenerateRequest
	for _, r := range s.Requests() {
		if r.Generate != nil {
			out = append(out, r.Generate)
		}
	}
	return out
}

// modelsPrefix is where the API's model methods live.
const modelsPrefix = "/v1beta/models/"

// ServeHTTP records the request and answers it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()}
	query := r.URL.Query()
	rec.HasAPIKey = rec.Header.Get("X-Goog-Api-Key") != "" || rec.Header.Get("Authorization") != "" || query.Get("key") != ""
	rec.KeySHA256 = scripted.KeyDigest(rec.Header.Values("X-Goog-Api-Key"))
	rec.OtherCredential = rec.Header.Get("Authorization") != "" || query.Has("key")
	rec.Header.Del("X-Goog-Api-Key")
	rec.Header.Del("Authorization")
	query.Del("key")
	rec.RawQuery = query.Encode()
	model, method, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, modelsPrefix), ":")
	if !ok || !strings.HasPrefix(r.URL.Path, modelsPrefix) || r.Method != http.MethodPost {
		model, method = "", ""
	}
	rec.Model, rec.Action = model, method
	switch method {
	case "generateContent", "streamGenerateContent":
		var body GenerateRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&body); err != nil {
			s.record(rec)
			writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "decoding the request body: "+err.Error())
			return
		}
		rec.Generate = &body
		chunks := s.reply(rec)
		if method == "generateContent" {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(merge(chunks))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		for _, c := range chunks {
			b, _ := json.Marshal(c) // structs of plain values
			fmt.Fprintf(w, "data: %s\r\n\r\n", b)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
	case "countTokens":
		s.record(rec)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"totalTokens":1}`)
	default:
		s.record(rec)
		if s.Logf != nil {
			s.Logf("scripted Gemini API: no such endpoint %s %s", r.Method, r.URL.Path)
		}
		writeError(w, http.StatusNotFound, "NOT_FOUND", "Not found: "+r.Method+" "+r.URL.Path)
	}
}

func (s *Server) record(r Request) { s.session.Record(r) }

// reply records a model request and builds its answer from the next turn
// of the script, or the final text once the script is used up: one chunk
// per part, the last carrying the finish reason and usage.
func (s *Server) reply(r Request) []chunk {
	index, ok := s.session.Next(r)
	turn, args := Turn{Text: FinalText}, json.RawMessage(nil)
	if ok {
		turn, args = s.script[index], s.args[index]
	}
	var parts []Part
	if turn.Text != "" || turn.Call == nil {
		parts = append(parts, Part{Text: turn.Text})
	}
	if turn.Call != nil {
		parts = append(parts, Part{FunctionCall: &FunctionCall{ID: CallID(index), Name: turn.Call.Name, Args: args}})
	}
	chunks := make([]chunk, len(parts))
	for i, p := range parts {
		chunks[i] = chunk{
			Candidates:   []candidate{{Content: Content{Role: "model", Parts: []Part{p}}}},
			ModelVersion: r.Model, ResponseID: fmt.Sprintf("resp_hookbox_%02d", index),
		}
	}
	last := &chunks[len(chunks)-1]
	last.Candidates[0].FinishReason = "STOP"
	last.UsageMetadata = &usage{PromptTokenCount: 1, CandidatesTokenCount: 1, TotalTokenCount: 2}
	return chunks
}

// merge makes the one response generateContent answers with from a
// stream's chunks.
func merge(chunks []chunk) chunk {
	out := chunks[len(chunks)-1]
	var parts []Part
	for _, c := range chunks {
		parts = append(parts, c.Candidates[0].Content.Parts...)
	}
	out.Candidates = []candidate{{Content: Content{Role: "model", Parts: parts}, FinishReason: out.Candidates[0].FinishReason}}
	return out
}

// chunk is one GenerateContentResponse: the whole answer of
// generateContent, or one event of streamGenerateContent.
type chunk struct {
	Candidates    []candidate `json:"candidates"`
	UsageMetadata *usage      `json:"usageMetadata,omitempty"`
	ModelVersion  string      `json:"modelVersion"`
	ResponseID    string      `json:"responseId"`
}

type candidate struct {
	Content      Content `json:"content"`
	FinishReason string  `json:"finishReason,omitempty"`
	Index        int     `json:"index"`
}

type usage struct {
	PromptTokenCount     int `json:"promptTokenCount"`
	CandidatesTokenCount int `json:"candidatesTokenCount"`
	TotalTokenCount      int `json:"totalTokenCount"`
}

// writeError answers with the API's error shape (google.rpc.Status).
func writeError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"code": status, "message": message, "status": code},
	})
}
