{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType,
             AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=10 #-}
{-|
Requantization to any format the contract states (docs/guide/contract.md, Formats):
unsigned, negative integer or fraction bits, rounding to nearest (ties up or
to even) or truncating,
saturating or wrapping.

A format @(s, i, f)@ with @W = s + i + f@ bits is held in its container
@SFixed oi fo@ (@oi = 1 + max i 0@, @fo = max f 0@), the narrowest signed
type with no negative field that holds every value exactly; its values are
@q * 2^-f@ for a W-bit code @q@, i.e. container raw values @q * 2^up@ with
@up = fo - f@. 'requantizeTo' takes the exact value (an accumulator
@SFixed ci cf@) to such a container, exactly as the golden model
(@keras2clash.quant.formats.requantize@):

1. drop @d = cf - f@ fraction bits: 'Nearest' adds @2^(d-1)@ first (ties
   toward +infinity), 'NearestEven' adds @2^(d-1) - 1@ plus the lowest kept
   bit (ties to even: ap_fixed's AP_RND_CONV, tf.round), 'Truncate' adds
   nothing (toward -infinity); an arithmetic
   shift right. When @d <= 0@ the value is scaled up, exactly;
2. bring the code into W bits: 'Saturate' clamps it to @[-2^(W-1), 2^(W-1)-1]@
   (signed) or @[0, 2^W - 1]@ (unsigned); 'Wrap' keeps its low W bits, sign-
   or zero-extended;
3. scale by @2^up@ into the container.

Everything is computed in @Signed (ci + cf + fo + w + up + 2)@, wide enough
for the rounding offset, the left shift (at most @fo@ bits), the unsigned
maximum and the final scale, so no step can wrap by accident. The shift
amounts and bounds are constants: synthesis keeps wires, an adder and two
comparators.
-}
module K2C.Quant
  ( Rounding (..)
  , Overflow (..)
  , requantizeTo
  ) where

import Clash.Prelude

-- | How the dropped fraction bits round.
data Rounding = Nearest | NearestEven | Truncate

-- | What happens to a code beyond the format's W bits.
data Overflow = Saturate | Wrap

-- | @requantizeTo \@w \@up rounding overflow signed@: the exact value to the
-- format of @w@ bits whose values are container raw multiples of @2^up@.
requantizeTo
  :: forall w up ci cf oi fo
   . (KnownNat w, KnownNat up, KnownNat ci, KnownNat cf, KnownNat oi, KnownNat fo)
  => Rounding -> Overflow -> Bool -> SFixed ci cf -> SFixed oi fo
requantizeTo = requantizeIn @(ci + cf + fo + w + up + 2) @w @up @ci @cf @oi @fo

-- | 'requantizeTo' computed in @Signed wk@.
requantizeIn
  :: forall wk w up ci cf oi fo
   . (KnownNat wk, KnownNat w, KnownNat up, KnownNat ci, KnownNat cf, KnownNat oi, KnownNat fo)
  => Rounding -> Overflow -> Bool -> SFixed ci cf -> SFixed oi fo
requantizeIn rounding overflow signed acc = sf (SNat @fo) (resize (shiftL fitted upBits))
  where
    x, rounded, qMin, qMax, fitted :: Signed wk
    x = resize (unSF acc)
    upBits = natToNum @up :: Int
    width = natToNum @w :: Int
    dropped = natToNum @cf - natToNum @fo + upBits :: Int
    rounded
      | dropped <= 0 = shiftL x (negate dropped)
      | otherwise = case rounding of
          Nearest -> shiftR (x + bit (dropped - 1)) dropped
          NearestEven -> shiftR (x + bit (dropped - 1) - 1 + (if testBit x dropped then 1 else 0)) dropped
          Truncate -> shiftR x dropped
    qMin = if signed then negate (bit (width - 1)) else 0
    qMax = if signed then bit (width - 1) - 1 else bit width - 1
    low = resize (pack rounded) :: BitVector w
    fitted = case overflow of
      Saturate -> max qMin (min qMax rounded)
      Wrap
        | signed -> resize (unpack low :: Signed w)
        | otherwise -> unpack (resize low)
