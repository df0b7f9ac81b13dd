package httpapi

import (
	"strconv"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator/core"
	"github.com/vektah/gqlparser/v2/validator/rules"
)

// ValidationRules are gqlparser's default validation rules, with a
// subscription selecting one stream under two response keys (`a:
// eventProcessed b: eventProcessed`) refused as the GraphQL spec has it
// (GRAPHQL_VALIDATION_FAILED). gqlparser's SingleFieldSubscriptions counts
// field names, not response keys, and gqlgen's executor then failed such
// a subscription with an internal error.
func ValidationRules() *rules.Rules {
	r := rules.NewDefaultRules()
	r.ReplaceRule(rules.SingleFieldSubscriptionsRule.Name, singleStreamSubscriptions)
	return r
}

func singleStreamSubscriptions(observers *core.Events, addError core.AddErrFunc) {
	rules.SingleFieldSubscriptionsRule.RuleFunc(observers, addError)
	observers.OnOperation(func(walker *core.Walker, op *ast.OperationDefinition) {
		if walker.Schema.Subscription == nil || op.Operation != ast.Subscription {
			return
		}
		names, keys := map[string]bool{}, map[string]*ast.Position{}
		seen := map[string]bool{}
		var walk func(ast.SelectionSet)
		walk = func(set ast.SelectionSet) {
			for _, sel := range set {
				switch sel := sel.(type) {
				case *ast.Field:
					names[sel.Name] = true
					key := sel.Alias
					if key == "" {
						key = sel.Name
					}
					if keys[key] == nil {
						keys[key] = sel.GetPosition()
					}
				case *ast.InlineFragment:
					walk(sel.SelectionSet)
				case *ast.FragmentSpread:
					if sel.Definition != nil && !seen[sel.Name] {
						seen[sel.Name] = true
						walk(sel.Definition.SelectionSet)
					}
				}
			}
		}
		walk(op.SelectionSet)
		// Two field names are the default rule's to report.
		if len(names) > 1 || len(keys) < 2 {
			return
		}
		name := "Anonymous Subscription"
		if op.Name != "" {
			name = "Subscription " + strconv.Quote(op.Name)
		}
		var at *ast.Position
		for _, pos := range keys {
			if at == nil || pos != nil && (pos.Line > at.Line || pos.Line == at.Line && pos.Column > at.Column) {
				at = pos
			}
		}
		addError(core.Message("%s must select only one top level field.", name), core.At(at))
	})
}
