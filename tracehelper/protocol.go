package tracehelper

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/ebpf"
)

// Version is the protocol version this package speaks. 2: the request
// and the ok reply carry the managed tracer's key.
const Version = 2

// DefaultSocket is where the helper listens unless SocketEnv says
// otherwise.
const DefaultSocket = "/run/hookbox-tracer/tracer.sock"

// SocketEnv overrides DefaultSocket, for clients and `tracer serve` alike.
const SocketEnv = "HOOKBOX_TRACER_SOCKET"

// SocketPath is the helper's socket: $HOOKBOX_TRACER_SOCKET, else
// DefaultSocket.
func SocketPath() string {
	if p := os.Getenv(SocketEnv); p != "" {
		return p
	}
	return DefaultSocket
}

// Message bounds.
const (
	// MaxAllowed bounds Policy.Allowed in one request: a run allows tens
	// of programs, and the tracer's allowed-file map (64Ki entries) is
	// shared by every watch.
	MaxAllowed = 4096
	// MaxRequestSize bounds the request line, newline included: a request
	// with MaxAllowed files of the largest encoding (56 bytes each) fits.
	MaxRequestSize = 256 << 10
	// maxReplySize bounds one line from the helper. The largest event
	// (ebpf.MaxArgvCap of argv, a 4 KiB filename) is under 256 KiB of JSON
	// even when every byte is escaped to six.
	maxReplySize = 1 << 20
	// maxControlSize bounds the client's lines after the request.
	maxControlSize = 4 << 10
	// maxFDs is how many passed fds a read can carry before the kernel
	// truncates them; one is allowed, more are counted to refuse them.
	maxFDs = 8
)

// Code says why the helper refused a watch. The values are stable.
type Code string

const (
	// CodeBadRequest: the request is malformed, too large, late, or does
	// not carry exactly one fd.
	CodeBadRequest Code = "bad-request"
	// CodeBadVersion: the client speaks another protocol version.
	CodeBadVersion Code = "bad-version"
	// CodeNotCgroup2: the fd is not a directory on a cgroup2 filesystem.
	CodeNotCgroup2 Code = "not-cgroup2"
	// CodeNotOwner: the cgroup directory is not owned by the peer's uid.
	CodeNotOwner Code = "not-owner"
	// CodeTooManyWatches: the uid's or the tracer's limit of concurrent
	// watches is reached.
	CodeTooManyWatches Code = "too-many-watches"
	// CodeBusy: the cgroup is already watched (by another connection).
	CodeBusy Code = "busy"
	// CodeTracerUnavailable: the helper cannot load the tracer on this
	// host, or is shutting down.
	CodeTracerUnavailable Code = "tracer-unavailable"
	// CodeWatchFailed: the tracer failed to arm the watch.
	CodeWatchFailed Code = "watch-failed"
	// CodeBadKey: a managed tracer was asked for another key (other BPF
	// objects or protocol): the client must use a tracer of its own key.
	CodeBadKey Code = "bad-key"
	// CodeForbidden: a managed tracer serves root only.
	CodeForbidden Code = "forbidden"
)

// RefusedError is the helper's refusal of a watch.
type RefusedError struct {
	Code    Code
	Message string
}

func (e *RefusedError) Error() string {
	return "tracer helper refused the watch (" + string(e.Code) + "): " + e.Message
}

func refusal(code Code, format string, args ...any) *RefusedError {
	return &RefusedError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Operations and reply types on the wire.
const (
	opWatch = "watch"
	opStop  = "stop"

	typeOK    = "ok"
	typeError = "error"
	typeEvent = "event"
	typeStats = "stats"
)

// request is a client line: the watch request, then stop.
type request struct {
	V      int          `json:"v,omitempty"`
	Op     string       `json:"op"`
	Key    string       `json:"key,omitempty"` // the managed tracer the client expects (ManagedKey)
	Policy *ebpf.Policy `json:"policy,omitempty"`
}

// reply is a helper line.
type reply struct {
	V        int         `json:"v,omitempty"`
	Type     string      `json:"type"`
	CgroupID uint64      `json:"cgroup_id,omitempty"`
	Key      string      `json:"key,omitempty"` // with ok: a managed tracer's key
	Code     Code        `json:"code,omitempty"`
	Message  string      `json:"message,omitempty"`
	Event    *ebpf.Event `json:"event,omitempty"`
	Stats    *ebpf.Stats `json:"stats,omitempty"`
	Error    string      `json:"error,omitempty"` // with stats: the watch's stop failed, or ended early
}

// An event line is the reply {"type":"event","event":…} as encoding/json
// writes it, but written and read without reflection: at an exec storm's
// rate, encoding/json was most of what tracing cost (see ebpf.AppendJSON).
const (
	eventLinePrefix = `{"type":"` + typeEvent + `","event":`
	eventLineSuffix = "}\n"
)

// appendEventLine appends ev's line, newline included.
func appendEventLine(dst []byte, ev ebpf.Event) []byte {
	dst = append(dst, eventLinePrefix...)
	dst = ev.AppendJSON(dst)
	return append(dst, eventLineSuffix...)
}

// parseReply reads a line: an event line without reflection when its
// event is in the form ebpf.AppendJSON writes, anything else with
// encoding/json, to the same result.
func parseReply(line []byte, rep *reply) error {
	if body, ok := bytes.CutPrefix(line, []byte(eventLinePrefix)); ok {
		if body, ok := bytes.CutSuffix(body, []byte(eventLineSuffix)); ok {
			var ev ebpf.Event
			if ev.UnmarshalJSON(body) == nil {
				*rep = reply{Type: typeEvent, Event: &ev}
				return nil
			}
		}
	}
	return json.Unmarshal(line, rep)
}

var errLineTooLong = errors.New("line too long")

// readLine reads one newline-terminated line of at most max bytes,
// newline included.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, fmt.Errorf("%w (over %d bytes)", errLineTooLong, max)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// rightsReader reads a unix connection and keeps the fds passed with
// SCM_RIGHTS (received close-on-exec). After take, fds that arrive are
// closed at once.
type rightsReader struct {
	conn      *net.UnixConn
	oob       []byte
	fds       []int
	truncated bool // the kernel dropped fds that did not fit in oob
	taken     bool
}

func newRightsReader(c *net.UnixConn) *rightsReader {
	return &rightsReader{conn: c, oob: make([]byte, unix.CmsgSpace(4*maxFDs))}
}

func (r *rightsReader) Read(p []byte) (int, error) {
	n, oobn, flags, _, err := r.conn.ReadMsgUnix(p, r.oob)
	if n < 0 {
		n = 0 // on some errors (a deadline) the syscall's -1 comes through
	}
	if flags&unix.MSG_CTRUNC != 0 {
		r.truncated = true
	}
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(r.oob[:oobn])
		for i := range msgs {
			fds, err := unix.ParseUnixRights(&msgs[i])
			if err != nil {
				continue // not SCM_RIGHTS
			}
			if r.taken {
				closeFDs(fds)
			} else {
				r.fds = append(r.fds, fds...)
			}
		}
	}
	return n, err
}

// take returns the fds received so far, and whether the kernel dropped
// some for lack of room.
func (r *rightsReader) take() ([]int, bool) {
	fds := r.fds
	r.fds, r.taken = nil, true
	return fds, r.truncated
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// sendWithFDs writes line with fds attached (SCM_RIGHTS) to its first
// part: a stream socket may take a long line in parts.
func sendWithFDs(c *net.UnixConn, line []byte, fds ...int) error {
	var rights []byte
	if len(fds) > 0 {
		rights = unix.UnixRights(fds...)
	}
	n, _, err := c.WriteMsgUnix(line, rights, nil)
	if err == nil && n < len(line) {
		_, err = c.Write(line[n:])
	}
	return err
}
