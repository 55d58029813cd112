// Kubernetes' name rules as the stand-ins apply them (k8s.io/apimachinery pkg/util/validation and
// kubernetes/kubernetes pkg/apis/core/v1/helper), written from upstream's definitions: which
// names the real API server and kubelet accept. For the stand-ins only.
#pragma once

#include <string>

namespace tessera::k8s {

// validation.IsDNS1123Subdomain: at most 253 characters, dot-separated lowercase alphanumeric
// labels that may hold '-' inside.
bool IsDns1123Subdomain(const std::string& value);
// validation.IsQualifiedName: [prefix/]name, prefix a DNS subdomain, name 1-63 characters of
// [-A-Za-z0-9_.] that begin and end alphanumeric.
bool IsQualifiedName(const std::string& value);
// v1helper.IsExtendedResourceName: what kubelet accepts in a device plugin's Register: not in the
// kubernetes.io/ namespace (nor unprefixed), not starting "requests.", and a qualified name once
// "requests." is put in front.
bool IsExtendedResourceName(const std::string& name);

}  // namespace tessera::k8s
