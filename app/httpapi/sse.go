package httpapi

import (
	"bytes"
	"io"
	"net/http"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"erp/resolvers"
)

// SSE is gqlgen's transport.SSE (graphql-sse's distinct connections
// mode) refusing, as GraphQLHTTP and graphql-sse's own server do, a
// request with neither `query` nor a persisted query: 400 with a JSON
// GraphQL error (BAD_USER_INPUT) before any stream starts. A document
// that does not parse or validate is still answered in the stream, as an
// `event: next` with the errors then `event: complete`: the protocol
// reports validation errors through the accepted stream.
type SSE struct{ transport.SSE }

var _ graphql.Transport = SSE{}

// Do implements graphql.Transport. LimitBody has already read the body
// into memory and refused one that is not a JSON object.
func (t SSE) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		_, err = requestParams(r)
	}
	if err != nil {
		w.Header().Set("Content-Type", mediaJSON)
		writeErrors(w, http.StatusBadRequest, gqlerror.List{resolvers.CodedError(err.Error(), resolvers.CodeBadUserInput)})
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	t.SSE.Do(w, r, exec)
}
