-- JSON helpers: RFC 6901 pointers and deep sets, used by value flows.

-- An RFC 6901 pointer as a jsonb path ('' = the whole document).
CREATE OR REPLACE FUNCTION pointer_to_path(p_pointer text)
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT COALESCE(array_agg(replace(replace(part, '~1', '/'), '~0', '~') ORDER BY n), '{}')
    FROM unnest(string_to_array(substr(p_pointer, 2), '/')) WITH ORDINALITY AS t(part, n)
    WHERE p_pointer <> ''
$function$;

-- doc with value set at path, creating missing intermediate objects.
CREATE OR REPLACE FUNCTION jsonb_set_deep(p_doc jsonb, p_path text[], p_value jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    v_inner jsonb;
BEGIN
    IF cardinality(p_path) = 0 THEN
        RETURN p_value;
    END IF;
    IF p_doc IS NULL OR jsonb_typeof(p_doc) NOT IN ('object', 'array') THEN
        p_doc := '{}'::jsonb;
    END IF;
    v_inner := p_doc -> p_path[1];
    IF jsonb_typeof(p_doc) = 'array' THEN
        v_inner := p_doc -> (p_path[1]::integer);
    END IF;
    RETURN jsonb_set(p_doc, p_path[1:1], jsonb_set_deep(v_inner, p_path[2:], p_value), true);
EXCEPTION WHEN invalid_text_representation THEN
    -- A non-numeric step into an array: leave the document as it is.
    RETURN p_doc;
END
$function$;

-- doc with each {pointer, value} of p_patches (a JSON array) set in order.
CREATE OR REPLACE FUNCTION jsonb_patch_pointers(p_doc jsonb, p_patches jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    v_patch jsonb;
BEGIN
    FOR v_patch IN SELECT value FROM jsonb_array_elements(p_patches) LOOP
        p_doc := jsonb_set_deep(p_doc, pointer_to_path(v_patch->>'pointer'), v_patch->'value');
    END LOOP;
    RETURN p_doc;
END
$function$;
