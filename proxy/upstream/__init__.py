"""The forward step: one hop to the route's upstream, raw HTTP (`http`) or through litellm
(`litellm`), behind the same `UpstreamClient.send` and `UpstreamResponse`."""
