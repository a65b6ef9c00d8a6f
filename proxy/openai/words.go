package openai

// word is a name Parse knows: a field, a role, a content part type.
type word uint8

const (
	wOther word = iota
	wModel
	wMessages
	wPrompt
	wStream
	wStreamOptions
	wIncludeUsage
	wN
	wMaxTokens
	wMaxCompletionTokens
	wUser // a field and a role
	wCacheSalt
	wPriority
	wKVTransferParams
	wRole
	wContent
	wType
	wText
	wSystem
	wAssistant
	wTool
	wDeveloper
	wFunction
	// Fields and types of the Messages, Responses and Embeddings APIs.
	wMetadata
	wUserID
	wTools
	wInput
	wInstructions
	wPreviousResponseID
	wStore
	wMaxOutputTokens
	wPromptCacheKey
	wConversation
	wID
	wMessage
	wInputText
	wOutputText
)

var roles = [...]string{
	wSystem:    "system",
	wUser:      "user",
	wAssistant: "assistant",
	wTool:      "tool",
	wDeveloper: "developer",
	wFunction:  "function",
}

// maxEscapedWord bounds the raw length of a string that may decode to a word: the longest
// word, "max_completion_tokens", has 21 bytes, each at most 6 raw bytes (\u0061).
const maxEscapedWord = 21 * 6

// lookup returns the word whose name is the JSON string with raw bytes raw (between the
// quotes; esc when they hold an escape, which is decoded first: "\u0073tream" is stream,
// as a Python backend reads it). Names are exact and case-sensitive.
func lookup(raw []byte, esc bool) word {
	if esc {
		if len(raw) > maxEscapedWord {
			return wOther
		}
		var buf [maxEscapedWord]byte
		raw = appendUnescaped(buf[:0], raw)
	}
	switch string(raw) {
	case "model":
		return wModel
	case "messages":
		return wMessages
	case "prompt":
		return wPrompt
	case "stream":
		return wStream
	case "stream_options":
		return wStreamOptions
	case "include_usage":
		return wIncludeUsage
	case "n":
		return wN
	case "max_tokens":
		return wMaxTokens
	case "max_completion_tokens":
		return wMaxCompletionTokens
	case "user":
		return wUser
	case "cache_salt":
		return wCacheSalt
	case "priority":
		return wPriority
	case "kv_transfer_params":
		return wKVTransferParams
	case "role":
		return wRole
	case "content":
		return wContent
	case "type":
		return wType
	case "text":
		return wText
	case "system":
		return wSystem
	case "assistant":
		return wAssistant
	case "tool":
		return wTool
	case "developer":
		return wDeveloper
	case "function":
		return wFunction
	case "metadata":
		return wMetadata
	case "user_id":
		return wUserID
	case "tools":
		return wTools
	case "input":
		return wInput
	case "instructions":
		return wInstructions
	case "previous_response_id":
		return wPreviousResponseID
	case "store":
		return wStore
	case "max_output_tokens":
		return wMaxOutputTokens
	case "prompt_cache_key":
		return wPromptCacheKey
	case "conversation":
		return wConversation
	case "id":
		return wID
	case "message":
		return wMessage
	case "input_text":
		return wInputText
	case "output_text":
		return wOutputText
	}
	return wOther
}

// topField returns the top-level field of ep that w names, or wOther. max_completion_tokens
// is a chat field only: vLLM's completions API ignores it, and so does Parse.
func topField(w word, ep API) word {
	switch w {
	case wModel, wStream, wStreamOptions, wN, wMaxTokens, wUser, wCacheSalt, wPriority, wKVTransferParams:
		return w
	case wMessages, wMaxCompletionTokens:
		if ep == Chat {
			return w
		}
	case wPrompt:
		if ep == Completions {
			return w
		}
	}
	return wOther
}

// fieldNames are the names of the top-level fields of every endpoint, for errors.
var fieldNames = [...]string{
	wModel:               "model",
	wMessages:            "messages",
	wPrompt:              "prompt",
	wStream:              "stream",
	wStreamOptions:       "stream_options",
	wN:                   "n",
	wMaxTokens:           "max_tokens",
	wMaxCompletionTokens: "max_completion_tokens",
	wUser:                "user",
	wCacheSalt:           "cache_salt",
	wPriority:            "priority",
	wKVTransferParams:    "kv_transfer_params",
	wInput:               "input",
	wTools:               "tools",
	wSystem:              "system",
	wMetadata:            "metadata",
	wInstructions:        "instructions",
	wPreviousResponseID:  "previous_response_id",
	wStore:               "store",
	wMaxOutputTokens:     "max_output_tokens",
	wPromptCacheKey:      "prompt_cache_key",
	wConversation:        "conversation",
}
