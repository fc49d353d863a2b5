package podinfo

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// AgentCNIPath is the agent's endpoint for CNI verbs on the kubernetes
// datastore:
//
//	POST /v1/cni   body: CNIRequest
//
// answers 200 with a CNIAnswer (the verb's result or its CNI error), or
// an error status with an AgentError when the agent cannot run it.
const AgentCNIPath = "/v1/cni"

// CNIRequest is one CNI invocation handed to the agent: the CNI_*
// variables and the network config, whose ipam.nodeName the plugin has
// filled in (the agent's environment is not the runtime's).
type CNIRequest struct {
	Command     string `json:"command"`
	ContainerID string `json:"containerID,omitempty"`
	NetNS       string `json:"netns,omitempty"`
	IfName      string `json:"ifName,omitempty"`
	Args        string `json:"args,omitempty"`
	Path        string `json:"path,omitempty"`
	Stdin       []byte `json:"stdin"`
}

// CNIAnswer is what the verb printed (Stdout) or, when it failed, its CNI
// error.
type CNIAnswer struct {
	Stdout []byte    `json:"stdout,omitempty"`
	Error  *CNIError `json:"error,omitempty"`
}

// CNIError is a CNI error object's fields.
type CNIError struct {
	Code    uint   `json:"code"`
	Msg     string `json:"msg"`
	Details string `json:"details,omitempty"`
}

// agentCNITimeout bounds one forwarded verb: the agent's own work is
// bounded by the plugin's timeout, which ctx carries.
const agentCNITimeout = 2 * time.Minute

// CNI hands one verb to the agent and returns its answer. An agent that
// cannot be reached is ErrAgentUnreachable (nothing was run, the caller
// may run the verb itself); its refusals wrap the sentinel of their
// reason.
func (a *AgentClient) CNI(ctx context.Context, req CNIRequest) (CNIAnswer, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return CNIAnswer{}, fmt.Errorf("%w: encoding the request: %w", ErrUnavailable, err)
	}
	var ans CNIAnswer
	if err := a.do(ctx, "POST", AgentCNIPath, body, agentCNITimeout, &ans); err != nil {
		return CNIAnswer{}, err
	}
	return ans, nil
}
