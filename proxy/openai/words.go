package openai

// word is a name Parse knows: a field, a role, a content part type, a member of a part.
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
	wUser
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
	// Fields Parse checks and passes on without reading (checks.go): sampling parameters
	// and the like, OpenAI's, Anthropic's and vLLM's.
	wTemperature
	wTopP
	wTopK
	wMinP
	wRepetitionPenalty
	wLengthPenalty
	wFrequencyPenalty
	wPresencePenalty
	wSeed
	wStop
	wStopSequences
	wLogprobs
	wTopLogprobs
	wPromptLogprobs
	wLogitBias
	wBestOf
	wMinTokens
	wUseBeamSearch
	wIgnoreEOS
	wIncludeStopStrInOutput
	wSkipSpecialTokens
	wSpacesBetweenSpecialTokens
	wStopTokenIDs
	wAllowedTokenIDs
	wBadWords
	wTruncatePromptTokens
	wEcho
	wAddGenerationPrompt
	wContinueFinalMessage
	wAddSpecialTokens
	wSuffix
	wResponseFormat
	wToolChoice
	wParallelToolCalls
	wReasoningEffort
	wMaxToolCalls
	wBackground
	wTruncation
	wReasoning
	wInclude
	wServiceTier
	wThinking
	wEncodingFormat
	wDimensions
	// Content part types and their members (parts.go).
	wImageURL
	wURL
	wDetail
	wInputAudio
	wAudioURL
	wVideoURL
	wRefusal
	wFile
	wInputImage
	wInputFile
	wFileID
	wFileData
	wFilename
	wFileURL
	wSource
	wImage
	wDocument
	wToolUse
	wToolResult
	wToolUseID
	wName
	wSignature
	wRedactedThinking
	wData
	nWords
)

// names are the JSON names of the words: lookup(names[w]) is w.
var names = [nWords]string{
	wModel:                      "model",
	wMessages:                   "messages",
	wPrompt:                     "prompt",
	wStream:                     "stream",
	wStreamOptions:              "stream_options",
	wIncludeUsage:               "include_usage",
	wN:                          "n",
	wMaxTokens:                  "max_tokens",
	wMaxCompletionTokens:        "max_completion_tokens",
	wUser:                       "user",
	wCacheSalt:                  "cache_salt",
	wPriority:                   "priority",
	wKVTransferParams:           "kv_transfer_params",
	wRole:                       "role",
	wContent:                    "content",
	wType:                       "type",
	wText:                       "text",
	wSystem:                     "system",
	wAssistant:                  "assistant",
	wTool:                       "tool",
	wDeveloper:                  "developer",
	wFunction:                   "function",
	wMetadata:                   "metadata",
	wUserID:                     "user_id",
	wTools:                      "tools",
	wInput:                      "input",
	wInstructions:               "instructions",
	wPreviousResponseID:         "previous_response_id",
	wStore:                      "store",
	wMaxOutputTokens:            "max_output_tokens",
	wPromptCacheKey:             "prompt_cache_key",
	wConversation:               "conversation",
	wID:                         "id",
	wMessage:                    "message",
	wInputText:                  "input_text",
	wOutputText:                 "output_text",
	wTemperature:                "temperature",
	wTopP:                       "top_p",
	wTopK:                       "top_k",
	wMinP:                       "min_p",
	wRepetitionPenalty:          "repetition_penalty",
	wLengthPenalty:              "length_penalty",
	wFrequencyPenalty:           "frequency_penalty",
	wPresencePenalty:            "presence_penalty",
	wSeed:                       "seed",
	wStop:                       "stop",
	wStopSequences:              "stop_sequences",
	wLogprobs:                   "logprobs",
	wTopLogprobs:                "top_logprobs",
	wPromptLogprobs:             "prompt_logprobs",
	wLogitBias:                  "logit_bias",
	wBestOf:                     "best_of",
	wMinTokens:                  "min_tokens",
	wUseBeamSearch:              "use_beam_search",
	wIgnoreEOS:                  "ignore_eos",
	wIncludeStopStrInOutput:     "include_stop_str_in_output",
	wSkipSpecialTokens:          "skip_special_tokens",
	wSpacesBetweenSpecialTokens: "spaces_between_special_tokens",
	wStopTokenIDs:               "stop_token_ids",
	wAllowedTokenIDs:            "allowed_token_ids",
	wBadWords:                   "bad_words",
	wTruncatePromptTokens:       "truncate_prompt_tokens",
	wEcho:                       "echo",
	wAddGenerationPrompt:        "add_generation_prompt",
	wContinueFinalMessage:       "continue_final_message",
	wAddSpecialTokens:           "add_special_tokens",
	wSuffix:                     "suffix",
	wResponseFormat:             "response_format",
	wToolChoice:                 "tool_choice",
	wParallelToolCalls:          "parallel_tool_calls",
	wReasoningEffort:            "reasoning_effort",
	wMaxToolCalls:               "max_tool_calls",
	wBackground:                 "background",
	wTruncation:                 "truncation",
	wReasoning:                  "reasoning",
	wInclude:                    "include",
	wServiceTier:                "service_tier",
	wThinking:                   "thinking",
	wEncodingFormat:             "encoding_format",
	wDimensions:                 "dimensions",
	wImageURL:                   "image_url",
	wURL:                        "url",
	wDetail:                     "detail",
	wInputAudio:                 "input_audio",
	wAudioURL:                   "audio_url",
	wVideoURL:                   "video_url",
	wRefusal:                    "refusal",
	wFile:                       "file",
	wInputImage:                 "input_image",
	wInputFile:                  "input_file",
	wFileID:                     "file_id",
	wFileData:                   "file_data",
	wFilename:                   "filename",
	wFileURL:                    "file_url",
	wSource:                     "source",
	wImage:                      "image",
	wDocument:                   "document",
	wToolUse:                    "tool_use",
	wToolResult:                 "tool_result",
	wToolUseID:                  "tool_use_id",
	wName:                       "name",
	wSignature:                  "signature",
	wRedactedThinking:           "redacted_thinking",
	wData:                       "data",
}

// maxEscapedWord bounds the raw length of a string that may decode to a word: the longest
// word, "spaces_between_special_tokens", has 29 bytes, each at most 6 raw bytes (\u0061).
const maxEscapedWord = 29 * 6

// lookup returns the word whose name is the JSON string with raw bytes raw (between the
// quotes; esc when they hold an escape, which is decoded first: "\u0073tream" is stream,
// as a Python backend reads it). Names are exact and case-sensitive. O(log nWords).
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
	case "temperature":
		return wTemperature
	case "top_p":
		return wTopP
	case "top_k":
		return wTopK
	case "min_p":
		return wMinP
	case "repetition_penalty":
		return wRepetitionPenalty
	case "length_penalty":
		return wLengthPenalty
	case "frequency_penalty":
		return wFrequencyPenalty
	case "presence_penalty":
		return wPresencePenalty
	case "seed":
		return wSeed
	case "stop":
		return wStop
	case "stop_sequences":
		return wStopSequences
	case "logprobs":
		return wLogprobs
	case "top_logprobs":
		return wTopLogprobs
	case "prompt_logprobs":
		return wPromptLogprobs
	case "logit_bias":
		return wLogitBias
	case "best_of":
		return wBestOf
	case "min_tokens":
		return wMinTokens
	case "use_beam_search":
		return wUseBeamSearch
	case "ignore_eos":
		return wIgnoreEOS
	case "include_stop_str_in_output":
		return wIncludeStopStrInOutput
	case "skip_special_tokens":
		return wSkipSpecialTokens
	case "spaces_between_special_tokens":
		return wSpacesBetweenSpecialTokens
	case "stop_token_ids":
		return wStopTokenIDs
	case "allowed_token_ids":
		return wAllowedTokenIDs
	case "bad_words":
		return wBadWords
	case "truncate_prompt_tokens":
		return wTruncatePromptTokens
	case "echo":
		return wEcho
	case "add_generation_prompt":
		return wAddGenerationPrompt
	case "continue_final_message":
		return wContinueFinalMessage
	case "add_special_tokens":
		return wAddSpecialTokens
	case "suffix":
		return wSuffix
	case "response_format":
		return wResponseFormat
	case "tool_choice":
		return wToolChoice
	case "parallel_tool_calls":
		return wParallelToolCalls
	case "reasoning_effort":
		return wReasoningEffort
	case "max_tool_calls":
		return wMaxToolCalls
	case "background":
		return wBackground
	case "truncation":
		return wTruncation
	case "reasoning":
		return wReasoning
	case "include":
		return wInclude
	case "service_tier":
		return wServiceTier
	case "thinking":
		return wThinking
	case "encoding_format":
		return wEncodingFormat
	case "dimensions":
		return wDimensions
	case "image_url":
		return wImageURL
	case "url":
		return wURL
	case "detail":
		return wDetail
	case "input_audio":
		return wInputAudio
	case "audio_url":
		return wAudioURL
	case "video_url":
		return wVideoURL
	case "refusal":
		return wRefusal
	case "file":
		return wFile
	case "input_image":
		return wInputImage
	case "input_file":
		return wInputFile
	case "file_id":
		return wFileID
	case "file_data":
		return wFileData
	case "filename":
		return wFilename
	case "file_url":
		return wFileURL
	case "source":
		return wSource
	case "image":
		return wImage
	case "document":
		return wDocument
	case "tool_use":
		return wToolUse
	case "tool_result":
		return wToolResult
	case "tool_use_id":
		return wToolUseID
	case "name":
		return wName
	case "signature":
		return wSignature
	case "redacted_thinking":
		return wRedactedThinking
	case "data":
		return wData
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
