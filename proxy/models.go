package proxy

import (
	"encoding/json"
	"slices"
)

// modelNames returns the ids of an OpenAI model list ({"data":[{"id":...}, ...]}).
func modelNames(body []byte) ([]string, error) {
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID != "" {
			names = append(names, m.ID)
		}
	}
	return names, nil
}

// staticModelList is the OpenAI model list of the configured models, sorted by name.
func staticModelList(models map[string]bool) []byte {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		OwnedBy string `json:"owned_by"`
	}
	names := make([]string, 0, len(models))
	for m := range models {
		names = append(names, m)
	}
	slices.Sort(names)
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: make([]model, len(names))}
	for i, n := range names {
		list.Data[i] = model{ID: n, Object: "model", OwnedBy: "usher"}
	}
	b, _ := json.Marshal(list)
	return b
}
