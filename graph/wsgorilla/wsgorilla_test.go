package wsgorilla

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// testMessage has the shape of gqlgen's messages (see envelope).
type testMessage struct {
	Payload json.RawMessage `json:"payload,omitempty"`
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
}

// A close reason quotes the client's operation id (4409): whatever the id,
// the reason is valid UTF-8 within a close frame's 123 bytes.
func TestCloseReasonIsValidUTF8WithinTheFrame(t *testing.T) {
	long := "Subscriber for x" + strings.Repeat("é", 100) + " already exists"
	for _, reason := range []string{"terminated", long, "Subscriber for \xff\xfe already exists"} {
		got := closeReason(reason)
		require.True(t, utf8.ValidString(got), "%q", got)
		require.LessOrEqual(t, len(got), maxCloseReason)
		require.True(t, strings.HasPrefix(reason, got) || !utf8.ValidString(reason), "%q cut from %q", got, reason)
	}
	require.Equal(t, "terminated", closeReason("terminated"))
	require.Len(t, closeReason(long), 122, "cut before the é that would straddle byte 123")
}

// A close reason quotes the client's message type (4400): whatever the
// type, however much its escapes grow it, the quote stays within
// maxQuotedType bytes and a cut one is marked, so the reason's own words
// are never cut off.
func TestQuotedTypeStaysShort(t *testing.T) {
	for _, typ := range []string{
		strings.Repeat("x", 10000),
		strings.Repeat("\x00", 10000),
		strings.Repeat("\u2028", 1000),
		strings.Repeat("é", 1000),
		"\xff\xfe" + strings.Repeat("y", 100),
	} {
		got := quoteType(typ)
		require.LessOrEqual(t, len(got), maxQuotedType+len("…"), "%q", got)
		require.True(t, strings.HasSuffix(got, `"…`), "%q", got)
		unquoted, err := strconv.Unquote(strings.TrimSuffix(got, "…"))
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(typ, unquoted), "%q cut from %q", unquoted, typ)
		reason := "unknown message type " + got
		require.Equal(t, reason, closeReason(reason), "the reason fits the frame")
	}
	require.Equal(t, `"hello"`, quoteType("hello"))
	require.Equal(t, `"a\tb"`, quoteType("a\tb"))
}
