package resolvers

import (
	"context"

	"github.com/99designs/gqlgen/graphql"

	"erp/db/catalog"
)

// Warning is one entry of a response's extensions.warnings: something the
// operation accepted but the client should change, with the input path it
// is about (e.g. "input.eventTypes").
type Warning struct {
	Message string `json:"message"`
	Field   string `json:"field"`
}

// warnDeprecated adds a Warning at field for each deprecated type in types
// to the response's extensions.warnings, after those already there.
func warnDeprecated(ctx context.Context, field string, types []string) {
	msgs := catalog.DeprecationWarnings(types)
	if len(msgs) == 0 {
		return
	}
	warnings, _ := graphql.GetExtension(ctx, "warnings").([]Warning)
	for _, m := range msgs {
		warnings = append(warnings, Warning{Message: m, Field: field})
	}
	graphql.RegisterExtension(ctx, "warnings", warnings)
}
