package compiler

// exec: any program, argv given verbatim: engine.path followed by
// engine.args. It takes no prompt, model, effort, MCP servers or hooks.

func init() {
	registerEngine(&engineDef{
		kind:    "exec",
		prompt:  promptNone,
		noHooks: "a plain program runs no hooks; run the hook program yourself as a tool, or use the scripted engine",
		build: func(c *compilation) error {
			c.r.Process.Argv = append([]string{c.spec.Engine.Path}, c.userArgs()...)
			return nil
		},
	})
}
