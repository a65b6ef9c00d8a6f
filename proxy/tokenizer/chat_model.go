package tokenizer

// RenderChat appends to dst the model's chat template (tokenizer_config.json's
// chat_template) rendered for c, exactly as transformers' apply_chat_template renders it
// with tokenize=False: Jinja2 with trim_blocks and lstrip_blocks, the special tokens of
// tokenizer_config.json (bos_token, eos_token, ...), messages, tools (None when there are
// none), add_generation_prompt, c.Kwargs, raise_exception and strftime_now.
//
// It returns [ErrNoChatTemplate] when the model has no template, and an error when the
// template raises or fails (an undefined value used, a type error), as Jinja2 would. The
// template is parsed once, when the model is loaded; RenderChat may be called by any
// number of goroutines at once. It runs in time linear in the template's work for c, and
// allocates for the template's values and to grow dst.
func (e *Encoder) RenderChat(dst []byte, c *Conversation) ([]byte, error) {
	return e.chat.render(dst, c)
}
